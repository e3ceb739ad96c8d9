#include "bench/cusparse_baseline.hpp"

#include <cusparse.h>

#include <algorithm>

#include "core/cuda_check.hpp"

namespace sparrow::bench {

namespace {

Status sp_status(cusparseStatus_t s, const char* what) {
  if (s == CUSPARSE_STATUS_SUCCESS) return Status::success();
  const Code code = s == CUSPARSE_STATUS_NOT_SUPPORTED ? Code::unsupported : Code::cuda_error;
  return {code, std::string(what) + ": " + cusparseGetErrorString(s)};
}
#define SP_OK(call) SPARROW_RETURN_IF_ERROR(sp_status((call), #call))

cudaDataType_t cuda_type(DType t) {
  return t == DType::fp16 ? CUDA_R_16F : t == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
}

}  // namespace

struct CusparseCsr::Impl {
  cusparseHandle_t handle = nullptr;
  std::vector<cusparseSpMatDescr_t> mats;  // one per weight copy
  cusparseDnVecDescr_t xv = nullptr, yv = nullptr;
  cusparseDnMatDescr_t xm = nullptr, ym = nullptr;
  void* buffer = nullptr;
  float alpha = 1.0f, beta = 0.0f;

  ~Impl() {
    for (auto m : mats) cusparseDestroySpMat(m);
    if (xv) cusparseDestroyDnVec(xv);
    if (yv) cusparseDestroyDnVec(yv);
    if (xm) cusparseDestroyDnMat(xm);
    if (ym) cusparseDestroyDnMat(ym);
    if (buffer) cudaFree(buffer);
    if (handle) cusparseDestroy(handle);
  }
};

CusparseCsr::~CusparseCsr() = default;

Result<std::unique_ptr<CusparseCsr>> CusparseCsr::create(const std::vector<Weight>& copies,
                                                        const ConstMatrixView& x,
                                                        const MatrixView& y) {
  if (copies.empty()) return invalid_argument("cuSPARSE baseline: no weight copies");
  std::unique_ptr<CusparseCsr> out(new CusparseCsr());
  out->impl_ = std::make_unique<Impl>();
  Impl& im = *out->impl_;
  SP_OK(cusparseCreate(&im.handle));
  const cudaDataType_t t = cuda_type(x.dtype);
  for (const Weight& w : copies) {
    const auto* c = std::get_if<csr::Matrix>(&w);
    if (!c || c->index_bits != 32 || !c->row_ptr.on_device()) {
      return invalid_argument("cuSPARSE baseline needs device csr weights with 32-bit indices");
    }
    cusparseSpMatDescr_t m = nullptr;
    SP_OK(cusparseCreateCsr(&m, c->shape.rows, c->shape.cols, c->nnz(),
                            const_cast<uint32_t*>(c->row_ptr.data()),
                            const_cast<uint32_t*>(c->col32.data()),
                            const_cast<uint8_t*>(c->values.data()), CUSPARSE_INDEX_32I,
                            CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, t));
    im.mats.push_back(m);
  }
  const int64_t M = y.cols, K = x.cols, N = x.rows;
  size_t bytes = 0;
  out->spmv_ = N == 1;
  if (out->spmv_) {
    SP_OK(cusparseCreateDnVec(&im.xv, K, const_cast<void*>(x.data), t));
    SP_OK(cusparseCreateDnVec(&im.yv, M, y.data, t));
    SP_OK(cusparseSpMV_bufferSize(im.handle, CUSPARSE_OPERATION_NON_TRANSPOSE, &im.alpha,
                                  im.mats[0], im.xv, &im.beta, im.yv, CUDA_R_32F,
                                  CUSPARSE_SPMV_ALG_DEFAULT, &bytes));
  } else {
    // Row-major X (N x K) is column-major X^T (K x N); Y^T = W * X^T is column-major M x N.
    SP_OK(cusparseCreateDnMat(&im.xm, K, N, x.ld, const_cast<void*>(x.data), t,
                              CUSPARSE_ORDER_COL));
    SP_OK(cusparseCreateDnMat(&im.ym, M, N, y.ld, y.data, t, CUSPARSE_ORDER_COL));
    SP_OK(cusparseSpMM_bufferSize(im.handle, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                  CUSPARSE_OPERATION_NON_TRANSPOSE, &im.alpha, im.mats[0], im.xm,
                                  &im.beta, im.ym, CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT, &bytes));
  }
  SPARROW_CUDA_RETURN_IF_ERROR(cudaMalloc(&im.buffer, std::max<size_t>(bytes, 16)));
  return out;
}

Status CusparseCsr::run(int copy, cudaStream_t stream) {
  Impl& im = *impl_;
  SP_OK(cusparseSetStream(im.handle, stream));
  if (spmv_) {
    SP_OK(cusparseSpMV(im.handle, CUSPARSE_OPERATION_NON_TRANSPOSE, &im.alpha,
                       im.mats[size_t(copy)], im.xv, &im.beta, im.yv, CUDA_R_32F,
                       CUSPARSE_SPMV_ALG_DEFAULT, im.buffer));
  } else {
    SP_OK(cusparseSpMM(im.handle, CUSPARSE_OPERATION_NON_TRANSPOSE,
                       CUSPARSE_OPERATION_NON_TRANSPOSE, &im.alpha, im.mats[size_t(copy)], im.xm,
                       &im.beta, im.ym, CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT, im.buffer));
  }
  return Status::success();
}

}  // namespace sparrow::bench
