/* cblas_sgemm through oneDNN's dnnl_sgemm (row-major), for putting oneDNN in place of a CBLAS
   (LD_PRELOAD) in scripts/comparisons/blas_candidates.sh's block comparison. */
#include <dnnl.h>
enum { kRowMajor = 101, kNoTrans = 111 };
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float* a,
                 int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  const char op_a = ta == kNoTrans ? 'N' : 'T', op_b = tb == kNoTrans ? 'N' : 'T';
  if (order == kRowMajor)
    dnnl_sgemm(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else /* C^T = B^T A^T, row-major */
    dnnl_sgemm(op_b, op_a, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc);
}
