"""A stand-in for the expecttest package (not packaged by Debian), which torch's test utilities
import: only what they use from it. Used by dist_suite.py; never installed."""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    longMessage = True

    def assertExpectedInline(self, actual, expect, skip=0):
        self.assertEqual(actual, expect)
