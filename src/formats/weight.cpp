// The operations of Weight, dispatched to each format's own functions.
#include "sparrow/weight.hpp"

#include <iterator>

namespace sparrow {

namespace {
template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

template <class M>
Result<Weight> wrap(Result<M> r) {
  if (!r.ok()) return r.status();
  return Weight(std::move(r).value());
}

// Applies `f` to every Buffer member of a format object (used for device copies).
template <class F>
Status for_each_buffer(dense::Matrix& m, F&& f) { return f(m.values); }
template <class F>
Status for_each_buffer(csr::Matrix& m, F&& f) {
  SPARROW_RETURN_IF_ERROR(f(m.row_ptr));
  SPARROW_RETURN_IF_ERROR(f(m.col16));
  SPARROW_RETURN_IF_ERROR(f(m.col32));
  return f(m.values);
}
template <class F>
Status for_each_buffer(macko::Matrix& m, F&& f) {
  SPARROW_RETURN_IF_ERROR(f(m.row_ptr));
  SPARROW_RETURN_IF_ERROR(f(m.values));
  SPARROW_RETURN_IF_ERROR(f(m.deltas));
  SPARROW_RETURN_IF_ERROR(f(m.row_order));
  return f(m.step_rows);
}
template <class F>
Status for_each_buffer(tca_bme::Matrix& m, F&& f) {
  SPARROW_RETURN_IF_ERROR(f(m.bitmaps));
  SPARROW_RETURN_IF_ERROR(f(m.group_offsets));
  SPARROW_RETURN_IF_ERROR(f(m.values));
  return f(m.strip_starts);
}
template <class F>
Status for_each_buffer(tiled_csl::Matrix& m, F&& f) {
  SPARROW_RETURN_IF_ERROR(f(m.tile_offsets));
  return f(m.entries);
}
template <class F>
Status for_each_buffer(nm::Matrix& m, F&& f) {
  SPARROW_RETURN_IF_ERROR(f(m.values));
  return f(m.indices);
}

// `out`'s buffers replaced one by one by copies at `where` (each old one freed as it goes).
Result<Weight> move_to(Weight out, Location where) {
  Status s = std::visit(
      [&](auto& m) {
        return for_each_buffer(m, [&](auto& buf) -> Status {
          auto moved = (where == Location::device) ? buf.to_device() : buf.to_host();
          if (!moved.ok()) return moved.status();
          buf = std::move(moved).value();
          return Status::success();
        });
      },
      out);
  if (!s.ok()) return s;
  return out;
}

Status require_host(const Weight& w, const char* what) {
  if (location_of(w) != Location::host) {
    return invalid_argument(std::string(what) + " needs a host weight; call to_host() first");
  }
  return Status::success();
}
}  // namespace

Result<Weight> encode(Format f, const ConstMatrixView& w, const EncodeOptions& opt) {
  switch (f) {
    case Format::dense: return wrap(dense::encode(w));
    case Format::csr: return wrap(csr::encode(w, opt.csr_index));
    case Format::macko: return wrap(macko::encode(w));
    case Format::tca_bme: return wrap(tca_bme::encode(w));
    case Format::tiled_csl: return wrap(tiled_csl::encode(w, opt.tiled_csl_reorder));
    case Format::nm: return wrap(nm::encode(w, opt.nm_pattern));
  }
  return invalid_argument("unknown format");
}

Result<HostMatrix> decode(const Weight& w) {
  SPARROW_RETURN_IF_ERROR(require_host(w, "decode"));
  return std::visit(
      Overloaded{[](const dense::Matrix& m) { return dense::decode(m); },
                 [](const csr::Matrix& m) { return csr::decode(m); },
                 [](const macko::Matrix& m) { return macko::decode(m); },
                 [](const tca_bme::Matrix& m) { return tca_bme::decode(m); },
                 [](const tiled_csl::Matrix& m) { return tiled_csl::decode(m); },
                 [](const nm::Matrix& m) { return nm::decode(m); }},
      w);
}

Status validate(const Weight& w) {
  SPARROW_RETURN_IF_ERROR(require_host(w, "validate"));
  return std::visit(
      Overloaded{[](const dense::Matrix& m) { return dense::validate(m); },
                 [](const csr::Matrix& m) { return csr::validate(m); },
                 [](const macko::Matrix& m) { return macko::validate(m); },
                 [](const tca_bme::Matrix& m) { return tca_bme::validate(m); },
                 [](const tiled_csl::Matrix& m) { return tiled_csl::validate(m); },
                 [](const nm::Matrix& m) { return nm::validate(m); }},
      w);
}

static_assert(std::variant_size_v<Weight> == std::size(kAllFormats));
Format format_of(const Weight& w) { return static_cast<Format>(w.index()); }  // same order

const Shape& shape_of(const Weight& w) {
  return std::visit([](const auto& m) -> const Shape& { return m.shape; }, w);
}

size_t storage_bytes(const Weight& w) {
  return std::visit([](const auto& m) { return m.storage_bytes(); }, w);
}

size_t derived_bytes(const Weight& w) {
  if (const auto* m = std::get_if<macko::Matrix>(&w)) return m->derived_bytes();
  if (const auto* m = std::get_if<tca_bme::Matrix>(&w)) return m->derived_bytes();
  return 0;
}

double d_eff(const Weight& w) { return effective_density(storage_bytes(w), shape_of(w)); }

double expected_d_eff(Format f, double density) {
  switch (f) {
    case Format::dense: return 1.0;
    case Format::csr: return 2.0 * density;
    case Format::macko: return 1.25 * density + (density < 0.2 ? 0.05 : 0.0);
    case Format::tca_bme: return density + 1.0 / 16;
    case Format::tiled_csl: return 2.0 * density;
    case Format::nm: return density * (1.0 + 2.0 / 16);
  }
  return 1.0;
}

Location location_of(const Weight& w) {
  Location loc = Location::host;
  Weight& mut = const_cast<Weight&>(w);  // for_each_buffer only reads here
  (void)std::visit(
      [&](auto& m) {
        return for_each_buffer(m, [&](auto& buf) {
          if (buf.on_device()) loc = Location::device;
          return Status::success();
        });
      },
      mut);
  return loc;
}

std::vector<ArrayBytes> arrays_of(const Weight& w) {
  std::vector<ArrayBytes> out;
  Weight& mut = const_cast<Weight&>(w);  // for_each_buffer only reads here
  (void)std::visit(
      [&](auto& m) {
        return for_each_buffer(m, [&](auto& buf) {
          if (buf.bytes() > 0) out.push_back({buf.data(), buf.bytes()});
          return Status::success();
        });
      },
      mut);
  return out;
}

Result<Weight> to_device(const Weight& w) { return move_to(w, Location::device); }
Result<Weight> to_device(Weight&& w) { return move_to(std::move(w), Location::device); }
Result<Weight> to_host(const Weight& w) { return move_to(w, Location::host); }

}  // namespace sparrow
