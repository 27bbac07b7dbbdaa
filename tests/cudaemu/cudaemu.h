/* cudaemu: the CUDA backend's sources (kernels/cuda/) compiled by g++ and run on the CPU, so its
 * own kernels, its graphs and its bookkeeping are tested on machines without a GPU (`make
 * CUDA=emu`, `make emu`; docs/testing.md). This header stands in for the CUDA runtime,
 * cuda_bf16.h, cuDNN and cuBLAS, as far as the backend uses them; cudaemu.cc carries them out.
 *
 * What it is faithful to: each kernel's code runs for every thread of every block, a block's
 * threads as fibers that meet at __syncthreads (every thread must reach each one); dynamic
 * shared memory and device memory start as NaNs; bf16 rounds as the GPU does; a stream capture
 * records the stream's work, a graph launch replays it, and what the capturing thread may not
 * do (allocate, synchronise, time cuDNN) fails.
 *
 * When issued work runs, CUDAEMU_STREAMS:
 *   lazy (the default): each stream's work waits in its queue until something needs it: a
 *     synchronisation of its stream, of an event after it or of the device (cudaFree,
 *     cudaFreeHost and cudaStreamDestroy too), a query of such an event (answered "not ready"
 *     once, as the work then runs), work on another stream that waited for such an event, or a
 *     copy into pageable host memory on its stream. So work another stream did not wait for
 *     has not run, and page-locked host memory is read and written only when the copy runs: a
 *     missing wait, or host memory reused while a copy of it is pending, gives wrong numbers.
 *   eager: work runs when issued, in the host's order (such bugs go unseen).
 *   random[:SEED]: as lazy, and after each issue, one time in four, a stream picked at random
 *     runs some of its queue, ahead of older work on the others (seed 1 unless given).
 * In every order a copy from pageable host memory reads it during the call, as CUDA's does.
 *
 * The order of a grid's blocks, and of a block's threads from one barrier to the next,
 * CUDAEMU_THREADS: forward (the default: index order, x fastest), reverse, or shuffle[:SEED]
 * (a new random order for each grid and each stretch between barriers; seed 1 unless given).
 * CUDA promises no order, so a kernel whose results change with it has a race: forward hides
 * a thread or block that reads what a later one writes (reverse shows it), reverse the
 * opposite.
 *
 * Device memory, CUDAEMU_DEVICE_MEMORY:
 *   heap (the default): heap blocks of exactly the bytes asked for, so in a build with
 *     SANITIZE=1 (make sanitize's) ASan stops a kernel's access outside its blocks, and UBSan a
 *     misaligned vector access, naming the kernel and line;
 *   guarded (not under ASan): each block a mapping of its own, readable and writable only while
 *     device work runs, so host code that touches it faults, after a line naming the address
 *     and its block ("cudaemu: the host touched device memory at ..."). Each synchronisation
 *     then costs an mprotect per block.
 *
 * What it is not: one stream's work never overlaps another's (a race between kernels that
 * run at once on a GPU goes unseen), and a block's threads never interleave between two of
 * their accesses (a race that needs them to, and one whose outcome no order of whole stretches
 * changes, goes unseen: compute-sanitizer's racecheck, on a GPU); a kernel's access to host
 * memory goes unseen, and the host's to device memory unless guarded; static __shared__ arrays
 * are function-local statics (zero at first, then what the last block left); floats are not
 * contracted into FMAs as nvcc does; cuDNN's convolutions run on the program's CPU backend in
 * float and cuBLAS's GEMMs in double, with no TF32, every algorithm deterministic.
 *
 * CUDAEMU_CAPTURE=invalidated: every cudaStreamEndCapture fails as CUDA's does when a call in
 * the capture was refused (cudaErrorStreamCaptureInvalidated, no graph), so the program's answer
 * to a capture that a library broke on a GPU is tested.
 *
 * CUDAEMU_TRACE=FILE writes a line to FILE for each kernel, cuDNN convolution and cuBLAS GEMM
 * as it runs, and for each cudaSetDevice, saying whether MPI had started (tests/cudaemu/trace.sh
 * names the kernels): what a step launches, without a GPU. CUDAEMU_GPUS=N shows N GPUs (1 to
 * 16; one unless set), all the same CPU and memory.
 *
 * The sources reach it through the Makefile: `kernel<<<grid, block, shared, stream>>>(args)` is
 * rewritten to `kernel * cudaemu::config(grid, block, shared, stream)(args)` and `extern
 * __shared__ T name[];` to a pointer to the launch's dynamic shared memory. */
#ifndef CUDAEMU_H
#define CUDAEMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <tuple>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__     static
#define CUDART_VERSION 13000
#define CUDNN_MAJOR    9

/* ---- device-side types ---- */
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef dim3 uint3;
struct float2 {
    float x, y;
};
struct __attribute__((aligned(16))) float4 {
    float x, y, z, w;
};
struct __attribute__((aligned(16))) uint4 {
    unsigned x, y, z, w;
};
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }

/* ---- bf16 (cuda_bf16.h) ---- */
struct __nv_bfloat16 {
    uint16_t bits;
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
static inline float __bfloat162float(__nv_bfloat16 h) {
    uint32_t u = (uint32_t)h.bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    __nv_bfloat16 h;
    if ((u & 0x7fffffffu) > 0x7f800000u) h.bits = 0x7fff; /* any NaN: the canonical one, as CUDA's */
    else h.bits = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return h;
}
static inline float2 __bfloat1622float2(__nv_bfloat162 h) {
    return float2{__bfloat162float(h.x), __bfloat162float(h.y)};
}
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
    return __nv_bfloat162{__float2bfloat16_rn(a), __float2bfloat16_rn(b)};
}

/* ---- device intrinsics: IEEE operations, rounded to nearest ---- */
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }

namespace cudaemu {
/* A thread's coordinates in the launch that runs it. */
struct thread_ctx {
    dim3 thread, block, block_dim, grid_dim;
};
extern const thread_ctx *cur; /* the running thread's, while a grid runs */
void syncthreads();
void *dynamic_shared();
} // namespace cudaemu
#define threadIdx       (cudaemu::cur->thread)
#define blockIdx        (cudaemu::cur->block)
#define blockDim        (cudaemu::cur->block_dim)
#define gridDim         (cudaemu::cur->grid_dim)
#define __syncthreads() cudaemu::syncthreads()

/* ---- the runtime ---- */
enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorNotReady = 600,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorIllegalState = 401,
};
typedef enum cudaError cudaError_t;
typedef struct cudaemu_stream *cudaStream_t;
typedef struct cudaemu_event *cudaEvent_t;
typedef struct cudaemu_graph *cudaGraph_t;
typedef struct cudaemu_graph *cudaGraphExec_t;
typedef struct cudaemu_node *cudaGraphNode_t;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost,
    cudaMemcpyHostToDevice,
    cudaMemcpyDeviceToHost,
    cudaMemcpyDeviceToDevice,
    cudaMemcpyDefault
};
enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal,
    cudaStreamCaptureModeThreadLocal,
    cudaStreamCaptureModeRelaxed
};
enum cudaDeviceAttr { cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76 };
#define cudaStreamNonBlocking  1u
#define cudaEventDefault       0u
#define cudaEventDisableTiming 2u
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int major, minor, multiProcessorCount;
};
typedef enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType_t;

cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaDriverGetVersion(int *v);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaDeviceReset(void);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d);
cudaError_t cudaDeviceGetPCIBusId(char *buf, int len, int d);
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t from, cudaEvent_t to);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t *nodes, size_t *count);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g, unsigned long long flags);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);

namespace cudaemu {
/* Work issued on stream s: run now, or recorded when s is being captured by this thread. */
struct work {
    virtual ~work() {}
    virtual void run() = 0;
};
template <class F> struct work_of : work {
    F f;
    explicit work_of(F f_) : f(std::move(f_)) {}
    void run() override { f(); }
};
void submit(cudaStream_t s, work *w);
template <class F> void issue(cudaStream_t s, F f) { submit(s, new work_of<F>(std::move(f))); }

/* Whether a launch's configuration is one CUDA accepts (if not: says so, and cudaGetLastError
 * returns cudaErrorInvalidConfiguration). */
bool launch_valid(dim3 grid, dim3 block, size_t shared);
/* Runs fn(arg) as every thread of grid x block (with `shared` bytes of dynamic shared memory);
 * kernel: the kernel's address, which identifies it. */
void run_grid(const void *kernel, dim3 grid, dim3 block, size_t shared, void (*fn)(void *), void *arg);

template <class... A> struct bound;
struct config {
    dim3 grid, block;
    size_t shared;
    cudaStream_t stream;
    config(dim3 g, dim3 b, size_t sh = 0, cudaStream_t s = nullptr)
        : grid(g), block(b), shared(sh), stream(s) {}
    template <class... A> bound<A...> operator()(A... a) const;
};
template <class... A> struct bound {
    config c;
    std::tuple<A...> args;
};
template <class... A> bound<A...> config::operator()(A... a) const {
    return bound<A...>{*this, std::tuple<A...>(a...)};
}

template <class... P> struct launch_of {
    void (*kernel)(P...);
    std::tuple<P...> args;
    static void thread(void *self) {
        launch_of *l = (launch_of *)self;
        std::apply(l->kernel, l->args);
    }
};
/* kernel * config(...)(args): the launch, its arguments converted to the kernel's parameters. */
template <class... P, class... A> void operator*(void (*kernel)(P...), bound<A...> b) {
    launch_of<P...> l{kernel, std::apply([](A... a) { return std::tuple<P...>(a...); }, b.args)};
    config c = b.c;
    if (!launch_valid(c.grid, c.block, c.shared)) return;
    issue(c.stream, [l, c]() mutable {
        run_grid((const void *)l.kernel, c.grid, c.block, c.shared, launch_of<P...>::thread, &l);
    });
}
} // namespace cudaemu

/* ---- cuDNN ---- */
typedef enum {
    CUDNN_STATUS_SUCCESS = 0,
    CUDNN_STATUS_NOT_INITIALIZED = 1001,
    CUDNN_STATUS_BAD_PARAM = 2000,
    CUDNN_STATUS_NOT_SUPPORTED = 3000,
} cudnnStatus_t;
typedef struct cudaemu_cudnn *cudnnHandle_t;
typedef struct cudaemu_tensor *cudnnTensorDescriptor_t;
typedef struct cudaemu_tensor *cudnnFilterDescriptor_t;
typedef struct cudaemu_convdesc *cudnnConvolutionDescriptor_t;
typedef enum { CUDNN_TENSOR_NCHW = 0, CUDNN_TENSOR_NHWC = 1 } cudnnTensorFormat_t;
typedef enum { CUDNN_DATA_FLOAT = 0, CUDNN_DATA_BFLOAT16 = 9 } cudnnDataType_t;
typedef enum {
    CUDNN_DEFAULT_MATH = 0,
    CUDNN_TENSOR_OP_MATH = 1,
    CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION = 2,
    CUDNN_FMA_MATH = 3
} cudnnMathType_t;
typedef enum { CUDNN_CONVOLUTION = 0, CUDNN_CROSS_CORRELATION = 1 } cudnnConvolutionMode_t;
typedef enum { CUDNN_NON_DETERMINISTIC = 0, CUDNN_DETERMINISTIC = 1 } cudnnDeterminism_t;
typedef enum {
    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM = 0,
    CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED = 7,
    CUDNN_CONVOLUTION_FWD_ALGO_COUNT = 8
} cudnnConvolutionFwdAlgo_t;
typedef enum {
    CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 = 1,
    CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED = 5,
    CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT = 6
} cudnnConvolutionBwdDataAlgo_t;
typedef enum {
    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 = 1,
    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED = 5,
    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT = 7
} cudnnConvolutionBwdFilterAlgo_t;
#define CUDAEMU_PERF(name, algo_t)                                                                           \
    typedef struct {                                                                                         \
        algo_t algo;                                                                                         \
        cudnnStatus_t status;                                                                                \
        float time;                                                                                          \
        size_t memory;                                                                                       \
        cudnnDeterminism_t determinism;                                                                      \
        cudnnMathType_t mathType;                                                                            \
    } name
CUDAEMU_PERF(cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t);
CUDAEMU_PERF(cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t);
CUDAEMU_PERF(cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t);

const char *cudnnGetErrorString(cudnnStatus_t s);
size_t cudnnGetVersion(void);
cudnnStatus_t cudnnCreate(cudnnHandle_t *h);
cudnnStatus_t cudnnDestroy(cudnnHandle_t h);
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s);
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d);
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d);
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t f, cudnnDataType_t t,
                                         int n, int c, int h, int w);
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d);
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d);
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t f,
                                         int k, int c, int h, int w);
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d);
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d);
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w, int u,
                                              int v, int dil_h, int dil_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute);
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m);
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t x,
                                                    cudnnFilterDescriptor_t w, int *n, int *k, int *h,
                                                    int *wo);
cudnnStatus_t cudnnFindConvolutionForwardAlgorithm(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                   cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t c,
                                                   cudnnTensorDescriptor_t y, int want, int *got,
                                                   cudnnConvolutionFwdAlgoPerf_t *r);
cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithm(cudnnHandle_t h, cudnnFilterDescriptor_t w,
                                                        cudnnTensorDescriptor_t dy,
                                                        cudnnConvolutionDescriptor_t c,
                                                        cudnnTensorDescriptor_t dx, int want, int *got,
                                                        cudnnConvolutionBwdDataAlgoPerf_t *r);
cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithm(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                          cudnnTensorDescriptor_t dy,
                                                          cudnnConvolutionDescriptor_t c,
                                                          cudnnFilterDescriptor_t dw, int want, int *got,
                                                          cudnnConvolutionBwdFilterAlgoPerf_t *r);
cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha, cudnnTensorDescriptor_t xd,
                                      const void *x, cudnnFilterDescriptor_t wd, const void *w,
                                      cudnnConvolutionDescriptor_t c, cudnnConvolutionFwdAlgo_t algo,
                                      void *ws, size_t ws_bytes, const void *beta, cudnnTensorDescriptor_t yd,
                                      void *y);
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha, cudnnFilterDescriptor_t wd,
                                           const void *w, cudnnTensorDescriptor_t dyd, const void *dy,
                                           cudnnConvolutionDescriptor_t c, cudnnConvolutionBwdDataAlgo_t algo,
                                           void *ws, size_t ws_bytes, const void *beta,
                                           cudnnTensorDescriptor_t dxd, void *dx);
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha, cudnnTensorDescriptor_t xd,
                                             const void *x, cudnnTensorDescriptor_t dyd, const void *dy,
                                             cudnnConvolutionDescriptor_t c,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void *ws, size_t ws_bytes,
                                             const void *beta, cudnnFilterDescriptor_t dwd, void *dw);

/* ---- cuBLAS ---- */
typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;
typedef struct cudaemu_cublas *cublasHandle_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TF32_TENSOR_OP_MATH = 3 } cublasMath_t;
typedef enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_16BF = 75 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m);
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes);
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda, const float *B, int ldb,
                           const float *beta, float *C, int ldc);
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType_t at, int lda, const void *B,
                            cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo);

#endif
