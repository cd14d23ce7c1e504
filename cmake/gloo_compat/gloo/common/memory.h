// Stand-in for gloo/common/memory.h, which gloo's tcp/pair.h and tcp/context.h include and
// Debian 12's libgloo-dev does not ship. Used only where that header is missing (CMakeLists.txt:
// FLUXCPP_GLOO_COMPAT), and only by src/comm/gloo_auth.cpp, which derives from gloo's TCP pair.
//
// Layout is what matters: gloo's tcp::Op holds a WeakNonOwningPtr by value, so these must be
// exactly a std::shared_ptr (NonOwningPtr) and a std::weak_ptr (WeakNonOwningPtr, and the
// root ShareableNonOwningPtr a std::shared_ptr), as in the gloo the library was built from.
// Nothing here is called from fluxcpp's code: gloo's own code, compiled in libgloo, uses them.
#pragma once

#include <memory>

namespace gloo {

template <typename T>
class WeakNonOwningPtr;
template <typename T>
class ShareableNonOwningPtr;

// A use of an object held by a WeakNonOwningPtr, while it is alive.
template <typename T>
class NonOwningPtr final {
 public:
  NonOwningPtr() {}
  explicit NonOwningPtr(const WeakNonOwningPtr<T>& weak) : ptr_(weak.ptr_.lock()) {}
  T* operator->() const noexcept { return ptr_.get(); }
  explicit operator bool() const noexcept { return static_cast<bool>(ptr_); }

 private:
  std::shared_ptr<T> ptr_;
};

// A reference that does not keep the object alive.
template <typename T>
class WeakNonOwningPtr final {
 public:
  WeakNonOwningPtr() {}
  explicit WeakNonOwningPtr(const ShareableNonOwningPtr<T>& root) : ptr_(root.ptr_) {}
  explicit operator bool() const noexcept {
    return ptr_.owner_before(std::weak_ptr<T>{}) || std::weak_ptr<T>{}.owner_before(ptr_);
  }

 protected:
  std::weak_ptr<T> ptr_;
  friend class NonOwningPtr<T>;
};

// The object's own root reference (declared for the layout of gloo's types; fluxcpp never
// makes one).
template <typename T>
class ShareableNonOwningPtr final {
 public:
  ShareableNonOwningPtr(const ShareableNonOwningPtr&) = delete;
  ShareableNonOwningPtr& operator=(const ShareableNonOwningPtr&) = delete;

 protected:
  std::shared_ptr<T> ptr_;
  friend class WeakNonOwningPtr<T>;
};

}  // namespace gloo
