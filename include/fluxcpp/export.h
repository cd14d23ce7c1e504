/* fluxcpp/export.h: FLUXCPP_API, the mark of everything libfluxcpp exports. C and C++.
 *
 * The library is compiled with hidden visibility, so a symbol reaches users only if its
 * declaration in a public header carries FLUXCPP_API: every function of fluxcpp.h, every class
 * of include/fluxcpp/ (`class FLUXCPP_API AllGather`), every non-inline free function of the C++
 * API. Structs of plain options, enums and inline or constexpr functions need no mark. The
 * packaging.exports test fails on a C function that is not exported, on a public C++ class or
 * function declared without the mark, and on any exported symbol outside the public API. */
#ifndef FLUXCPP_EXPORT_H_
#define FLUXCPP_EXPORT_H_

#if defined(__GNUC__) || defined(__clang__)
#define FLUXCPP_API __attribute__((visibility("default")))
#else
#define FLUXCPP_API
#endif

#endif /* FLUXCPP_EXPORT_H_ */
