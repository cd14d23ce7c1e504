#include "shm/layout.hpp"

#include <fmt/format.h>

#include "shm/symmetric_buffer.hpp"

namespace fluxcpp::shm {

namespace {
constexpr std::size_t kPage = 4096;
}  // namespace

Signal& SignalArray::at(int owner, int i) const {
  return reinterpret_cast<Signal*>(bases_->base[owner] + offset_)[i];
}

std::string SignalArray::label(int i) const {
  return fmt::format("{}[{}]", name_, i);
}

char* SlotArray::at(int owner, int i) const {
  return bases_->base[owner] + offset_ + stride_ * static_cast<std::size_t>(i);
}

std::size_t Layout::place(std::size_t bytes, std::size_t align) {
  const std::size_t off = (end_ + align - 1) / align * align;
  end_ = off + bytes;
  return off;
}

SignalArray Layout::signals(std::string name, int count) {
  SignalArray a;
  a.bases_ = bases_;
  a.name_ = std::move(name);
  a.count_ = count;
  a.offset_ = place(sizeof(Signal) * static_cast<std::size_t>(count), alignof(Signal));
  return a;
}

SlotArray Layout::slots(std::string /*name*/, int count, std::size_t bytes) {
  SlotArray a;
  a.bases_ = bases_;
  a.count_ = count;
  a.bytes_ = bytes;
  a.stride_ = (bytes + kPage - 1) / kPage * kPage;
  a.offset_ = place(a.stride_ * static_cast<std::size_t>(count), kPage);
  return a;
}

void Layout::bind(const SymmetricBuffer& buffer) {
  bases_->base.clear();
  for (int i = 0; i < buffer.size(); ++i)
    bases_->base.push_back(static_cast<char*>(buffer.peer(i)));
  bases_->bytes = buffer.bytes();
}

bool Layout::overlaps(const void* p, std::size_t n) const {
  const char* lo = static_cast<const char*>(p);
  for (char* b : bases_->base)
    if (lo < b + bases_->bytes && b < lo + n) return true;
  return false;
}

}  // namespace fluxcpp::shm
