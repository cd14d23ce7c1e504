# Where libfluxcpp is, relative to this directory. The build tree and `cmake --install` write
# their own copy of this file; the source tree's has none (FLUXCPP_LIBRARY or the loader's
# search path then).
LIBRARY = None
