// cuBLAS and cuBLASLt, loaded on first use (cuda/lazy.h): call lazy::cublasLt...(...). Every
// function edp calls is listed here; the build does not link the libraries, so a call not listed
// fails to link instead of loading them at start.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>

#include "cuda/lazy.h"

#define EDP_CUBLAS_SONAME(lib) "lib" lib ".so." EDP_STR(CUBLAS_VER_MAJOR)
#define EDP_STR(x) EDP_STR2(x)
#define EDP_STR2(x) #x

EDP_LAZY_FN(EDP_CUBLAS_SONAME("cublas"), cublasGetStatusName)
EDP_LAZY_FN(EDP_CUBLAS_SONAME("cublas"), cublasGetStatusString)
EDP_LAZY_FN(EDP_CUBLAS_SONAME("cublasLt"), cublasLtCreate)
EDP_LAZY_FN(EDP_CUBLAS_SONAME("cublasLt"), cublasLtMatmul)
EDP_LAZY_FN(EDP_CUBLAS_SONAME("cublasLt"), cublasLtMatmulAlgoGetHeuristic)
EDP_LAZY_FN(EDP_CUBLAS_SONAME("cublasLt"), cublasLtMatmulDescCreate)
EDP_LAZY_FN(EDP_CUBLAS_SONAME("cublasLt"), cublasLtMatmulDescSetAttribute)
EDP_LAZY_FN(EDP_CUBLAS_SONAME("cublasLt"), cublasLtMatmulPreferenceCreate)
EDP_LAZY_FN(EDP_CUBLAS_SONAME("cublasLt"), cublasLtMatmulPreferenceDestroy)
EDP_LAZY_FN(EDP_CUBLAS_SONAME("cublasLt"), cublasLtMatmulPreferenceSetAttribute)
EDP_LAZY_FN(EDP_CUBLAS_SONAME("cublasLt"), cublasLtMatrixLayoutCreate)
EDP_LAZY_FN(EDP_CUBLAS_SONAME("cublas"), cublasCreate_v2)
EDP_LAZY_FN(EDP_CUBLAS_SONAME("cublas"), cublasSetStream_v2)
EDP_LAZY_FN(EDP_CUBLAS_SONAME("cublas"), cublasSetMathMode)
EDP_LAZY_FN(EDP_CUBLAS_SONAME("cublas"), cublasSgemmStridedBatched)
EDP_LAZY_FN_TYPED(EDP_CUBLAS_SONAME("cublas"), cublasGemmStridedBatchedEx,
                  cublasStatus_t(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                 const void*, cudaDataType, int, long long, const void*, cudaDataType, int, long long,
                                 const void*, void*, cudaDataType, int, long long, int, cublasComputeType_t,
                                 cublasGemmAlgo_t))
