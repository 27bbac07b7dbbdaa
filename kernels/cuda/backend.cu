/* The CUDA backend's table, memory, queues and events, and the plugin's entry point
 * (kernels/cuda/plugin.h). One GPU per process: the first kernels_cuda(device) call selects it
 * and creates everything, shutdown() releases it all (a later kernels_cuda() starts afresh); ops
 * live in their own files.
 *
 * Three streams: compute (every op), input (input_upload_async: input batches) and transfer
 * (upload_async, download_async: staged gradients), so an input upload never queues behind
 * gradient copies. */
extern "C" {
#include "../../common/err.h"
#include "../kernels.h"
#include "plugin.h"
}
#include "cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int selected = -1;
static cudaStream_t compute_stream, input_stream, transfer_stream;
static cudnnHandle_t cudnn;
static cublasHandle_t cublas;
static void *scratch;
static size_t scratch_bytes;
/* Graphs: whether the compute stream is being captured, how many graphs exist, the scratch
 * buffers outgrown while some did (a graph keeps the pointers its ops were given, so those stay
 * allocated until no graph is left), and cuBLAS's workspace (ours, so no capture makes cuBLAS
 * allocate). */
static int capturing, live_graphs;
static int graph_work; /* from a capture's start to its graph's instantiation, and a launch */
enum { MAX_RETIRED = 64 };
static void *retired[MAX_RETIRED];
static int nretired;
#define CUBLAS_WORKSPACE ((size_t)32 << 20)
static void *cublas_workspace;
static int nhwc = 1;          /* the activations' layout, set when the backend starts (cuda_table) */
static int deterministic = 1; /* cuDNN's algorithms: deterministic ones only, likewise */
static int small_conv = 1;    /* the forward of convolutions on few input channels: ours, likewise */
static int filters_ready = 1; /* filter sets made ready per update (filters.cu), likewise */

/* A failure while a step is recorded as a graph or its graph launched says how to run without
 * graphs: a library call that refuses a capture on some GPU or driver, not our code, may be the
 * cause. */
void cuda_fail(const char *api, const char *expr, const char *what, const char *file, int line) {
    fprintf(
        stderr, "%s: %s call failed: %s: %s at %s:%d%s\n", err_progname(), api, expr, what, file, line,
        graph_work
            ? " (recording or launching a CUDA graph: CIFAR10_CUDA_GRAPHS=off runs the steps without graphs)"
            : "");
    exit(1);
}

const char *cuda_cublas_error(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
    }
}

int cuda_tf32(void) {
    const char *v = getenv("NVIDIA_TF32_OVERRIDE");
    return !(v && strcmp(v, "0") == 0);
}

int cuda_nhwc(void) { return nhwc; }
int cuda_deterministic(void) { return deterministic; }
int cuda_small_conv(void) { return small_conv; }
int cuda_filters_on(void) { return filters_ready; }

/* Environment variable `name`: 1 for `yes` (or unset, empty), 0 for `no`; anything else is an
 * error naming both. */
static int switch_from_env(const char *name, const char *yes, const char *no) {
    const char *v = getenv(name);
    if (!v || !*v || strcmp(v, yes) == 0) return 1;
    if (strcmp(v, no) == 0) return 0;
    err_die(1, "%s=%s: expected %s or %s", name, v, yes, no);
}

cudaStream_t cuda_stream(void) { return compute_stream; }
int cuda_capturing(void) { return capturing; }

/* The entry points that must not run during a capture (kernels.h) stop here with the rule. */
static void not_capturing(const char *what) {
    if (capturing) err_die(1, "internal error: %s during a graph capture", what);
}
cudnnHandle_t cuda_cudnn(void) { return cudnn; }
cublasHandle_t cuda_cublas(void) { return cublas; }

unsigned cuda_blocks(size_t n) {
    size_t b = (n + CUDA_THREADS - 1) / CUDA_THREADS;
    if (b < 1) b = 1;
    return b > 65535u * 16u ? 65535u * 16u : (unsigned)b; /* grid-stride loops do the rest */
}

struct channel_of cuda_channel_of(int N, int C, int HW) {
    CHECK(N >= 1 && C >= 1 && HW >= 1 && (uint64_t)N * C * HW < (uint64_t)1 << 31);
    struct channel_of k;
    k.hw = fastdiv_make((uint32_t)HW);
    k.c = fastdiv_make((uint32_t)C);
    return k;
}

void *cuda_scratch(size_t bytes) {
    if (bytes > scratch_bytes) {
        if (capturing) err_die(1, "internal error: the scratch buffer grows during a graph capture");
        /* The old one may still be in use, by work on any stream, or by a graph. */
        CUDA_CHECK(cudaDeviceSynchronize());
        if (live_graphs) {
            CHECK(nretired < MAX_RETIRED);
            retired[nretired++] = scratch;
        } else CUDA_CHECK(cudaFree(scratch));
        CUDA_CHECK(cudaMalloc(&scratch, bytes));
        scratch_bytes = bytes;
    }
    return scratch;
}

/* kernels.h's graphs: stream capture of the compute stream, instantiated when it ends. Thread-
 * local mode: a call unsafe in a capture fails it when this thread makes it (not_capturing
 * names ours first), while other threads, such as an MPI library's progress threads with
 * several ranks, go on as they would. */
struct kernels_graph {
    cudaGraphExec_t exec;
};

static int cuda_capture_begin(void) {
    CHECK(!capturing);
    graph_work = 1;
    CUDA_CHECK(cudaStreamBeginCapture(compute_stream, cudaStreamCaptureModeThreadLocal));
    capturing = 1;
    return 0;
}

static struct kernels_graph *cuda_capture_end(void) {
    CHECK(capturing);
    cudaGraph_t graph;
    CUDA_CHECK(cudaStreamEndCapture(compute_stream, &graph));
    capturing = 0;
    cuda_filters_capture_end();
    size_t nodes = 0;
    CUDA_CHECK(cudaGraphGetNodes(graph, NULL, &nodes));
    struct kernels_graph *g = (struct kernels_graph *)malloc(sizeof *g); /* (XALLOC: not exported) */
    CHECK(g);
    g->exec = NULL; /* nothing recorded (a stretch with no op, such as the one after the last
                     * bucket of several ranks' steps): nothing to launch */
    if (nodes) CUDA_CHECK(cudaGraphInstantiate(&g->exec, graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));
    live_graphs++;
    graph_work = 0;
    return g;
}

static void cuda_graph_launch(struct kernels_graph *g) {
    CHECK(!capturing);
    graph_work = 1;
    if (g->exec) CUDA_CHECK(cudaGraphLaunch(g->exec, compute_stream));
    graph_work = 0;
    /* CUDA_SYNC=1 (cuda.h): a kernel that faults inside the graph is reported here, not at a
     * later, unrelated call (LAUNCH_CHECK cannot synchronise while the graph is captured) */
    if (CUDA_SYNC && g->exec) CUDA_CHECK(cudaStreamSynchronize(compute_stream));
}

static void cuda_graph_destroy(struct kernels_graph *g) {
    not_capturing("graph_destroy");
    CUDA_CHECK(cudaStreamSynchronize(compute_stream)); /* no launch of it still running */
    if (g->exec) CUDA_CHECK(cudaGraphExecDestroy(g->exec));
    free(g);
    if (--live_graphs == 0) /* nothing refers to the outgrown scratch buffers any more */
        while (nretired) CUDA_CHECK(cudaFree(retired[--nretired]));
}

static void *cuda_alloc(size_t bytes) {
    not_capturing("alloc");
    void *p = NULL;
    cudaError_t rc = cudaMalloc(&p, bytes ? bytes : 1);
    if (rc != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        fprintf(stderr, "%s: out of GPU memory allocating %zu bytes (%zu of %zu MiB free): %s\n",
                err_progname(), bytes, free_b >> 20, total_b >> 20, cudaGetErrorString(rc));
        exit(1);
    }
    /* Zero-filled, as the contract says, and finished before return: a copy queue (input,
     * transfer) may write the buffer next. */
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes ? bytes : 1, compute_stream));
    CUDA_CHECK(cudaStreamSynchronize(compute_stream));
    return p;
}

static void cuda_free(void *p) {
    not_capturing("free");
    if (!p) return;
    CUDA_CHECK(cudaStreamSynchronize(compute_stream));
    CUDA_CHECK(cudaFree(p));
}

static void cuda_upload(void *dst, const void *src, size_t bytes) {
    not_capturing("upload");
    cuda_filters_touched(dst, bytes);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, compute_stream));
    CUDA_CHECK(cudaStreamSynchronize(compute_stream)); /* src may be reused at once */
}

static void cuda_download(void *dst, const void *src, size_t bytes) {
    not_capturing("download");
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, compute_stream));
    CUDA_CHECK(cudaStreamSynchronize(compute_stream));
}

static void *cuda_host_alloc(size_t bytes) {
    not_capturing("host_alloc");
    void *p = NULL;
    CUDA_CHECK(cudaMallocHost(&p, bytes ? bytes : 1));
    memset(p, 0, bytes);
    return p;
}

static void cuda_host_free(void *p) {
    not_capturing("host_free");
    if (p) CUDA_CHECK(cudaFreeHost(p));
}

/* struct kernels_event is a cudaEvent_t (a pointer type) in disguise. */
static struct kernels_event *cuda_event_create(void) {
    not_capturing("event_create");
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return (struct kernels_event *)e;
}

/* A timer is an event with timing on; its marks are recorded on the compute stream. */
static struct kernels_event *cuda_timer_create(void) {
    not_capturing("timer_create");
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreate(&e));
    return (struct kernels_event *)e;
}

static void cuda_timer_mark(struct kernels_event *e) {
    not_capturing("timer_mark");
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)e, compute_stream));
}

static double cuda_timer_seconds(struct kernels_event *from, struct kernels_event *to) {
    not_capturing("timer_seconds");
    float ms = 0.0f;
    CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)to));
    CUDA_CHECK(cudaEventElapsedTime(&ms, (cudaEvent_t)from, (cudaEvent_t)to));
    return 1e-3 * ms;
}

static void cuda_event_destroy(struct kernels_event *e) {
    not_capturing("event_destroy");
    if (e) CUDA_CHECK(cudaEventDestroy((cudaEvent_t)e));
}

static void upload_on(cudaStream_t stream, void *dst, const void *src, size_t bytes,
                      struct kernels_event *done) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
    if (done) CUDA_CHECK(cudaEventRecord((cudaEvent_t)done, stream));
}

static void cuda_input_upload_async(void *dst, const void *src, size_t bytes, struct kernels_event *done) {
    not_capturing("input_upload_async");
    upload_on(input_stream, dst, src, bytes, done);
}

static void cuda_upload_async(void *dst, const void *src, size_t bytes, struct kernels_event *done) {
    not_capturing("upload_async");
    upload_on(transfer_stream, dst, src, bytes, done);
}

static void cuda_download_async(void *dst, const void *src, size_t bytes, struct kernels_event *done) {
    not_capturing("download_async");
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)done, compute_stream));
    if (bytes == 0) return;
    CUDA_CHECK(cudaStreamWaitEvent(transfer_stream, (cudaEvent_t)done, 0));
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, transfer_stream));
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)done, transfer_stream));
}

/* (Page-locked host memory, so a graph may hold it as a copy node.) */
static void cuda_download_queued(void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, compute_stream));
}

static void cuda_compute_wait(struct kernels_event *e) {
    not_capturing("compute_wait");
    CUDA_CHECK(cudaStreamWaitEvent(compute_stream, (cudaEvent_t)e, 0));
}

static int cuda_event_done(struct kernels_event *e) {
    not_capturing("event_done");
    cudaError_t rc = cudaEventQuery((cudaEvent_t)e);
    if (rc == cudaErrorNotReady) {
        /* no error, but a runtime may keep it as the last one, which the next launch's check
         * (cudaGetLastError) would report; any other error pending stays for that check */
        if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
        return 0;
    }
    CUDA_CHECK(rc);
    return 1;
}

static void cuda_event_wait(struct kernels_event *e) {
    not_capturing("event_wait");
    CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)e));
}

/* The reverse of kernels_cuda(): waits for the device, then releases the plans, the scratch,
 * the handles and the streams, and resets the device (its primary context), which also frees
 * anything a caller forgot; compute-sanitizer's leak check reports only once the context is
 * gone. Afterwards nothing of the old state is valid: selected = -1 makes kernels_cuda()
 * create it all again. */
static void cuda_shutdown(void) {
    CHECK(selected >= 0);
    CUDA_CHECK(cudaSetDevice(selected)); /* the device cudaDeviceReset acts on, from any thread */
    CUDA_CHECK(cudaDeviceSynchronize()); /* nothing below may still be in use */
    cuda_conv_release();
    cuda_filters_release();
    CUDA_CHECK(cudaFree(scratch));
    scratch = NULL, scratch_bytes = 0;
    while (nretired) CUDA_CHECK(cudaFree(retired[--nretired]));
    live_graphs = 0;
    CUBLAS_CHECK(cublasDestroy(cublas));
    CUDA_CHECK(cudaFree(cublas_workspace));
    cublas_workspace = NULL;
    CUDNN_CHECK(cudnnDestroy(cudnn));
    CUDA_CHECK(cudaStreamDestroy(compute_stream));
    CUDA_CHECK(cudaStreamDestroy(input_stream));
    CUDA_CHECK(cudaStreamDestroy(transfer_stream));
    CUDA_CHECK(cudaDeviceReset());
    selected = -1;
}

static struct kernels table, bf16_table;

/* The bf16 table's form (cuda.h), from CIFAR10_CUDA_BF16. */
static enum cuda_precision bf16_precision(void) {
    return switch_from_env("CIFAR10_CUDA_BF16", "activations", "copies") ? CUDA_BF16 : CUDA_BF16_COPIES;
}

/* kernels_cuda_devices; the loader has found the driver (without one the runtime would only say
 * "driver version is insufficient"). */
static int devices(struct err *e) {
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        cudaGetLastError(); /* clear it: the CPU backend goes on */
        int version = 0;
        cudaDriverGetVersion(&version);
        if (rc == cudaErrorInsufficientDriver)
            return err_set(
                       e,
                       "the NVIDIA driver supports CUDA %d.%d, this build needs CUDA %d.%d (driver >= 580)",
                       version / 1000, version % 1000 / 10, CUDART_VERSION / 1000,
                       CUDART_VERSION % 1000 / 10),
                   0;
        return err_set(e, "%s", cudaGetErrorString(rc)), 0;
    }
    if (n == 0) return err_set(e, "no CUDA device"), 0;
    return n;
}

/* The ops of every op file in precision p (cuda.h), with the activations' element size; a
 * table missing an op stops here, not at a NULL call. */
static void fill_ops(struct kernels *k, enum cuda_precision p) {
    k->act_size = p == CUDA_BF16 ? sizeof(bf16_t) : sizeof(float);
    cuda_fill_conv(k, p);
    cuda_fill_linear(k, p);
    cuda_fill_elementwise(k, p);
    cuda_fill_maxpool(k, p);
    cuda_fill_batchnorm(k, p);
    cuda_fill_softmax_xent(k, p);
    cuda_fill_layout(k, p);
    struct err e;
    if (kernels_check(k, &e) < 0) err_die(1, "internal error: %s", e.msg);
}

static const struct kernels *cuda_table(int device) {
    if (selected >= 0) {
        CHECK(device == selected); /* one GPU per process */
        return &table;
    }
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&compute_stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&input_stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&transfer_stream, cudaStreamNonBlocking));
    CUDNN_CHECK(cudnnCreate(&cudnn));
    CUDNN_CHECK(cudnnSetStream(cudnn, compute_stream));
    CUBLAS_CHECK(cublasCreate(&cublas));
    CUBLAS_CHECK(cublasSetStream(cublas, compute_stream));
    /* FP32 GEMMs, as PyTorch's default (torch.backends.cuda.matmul.allow_tf32 = False). */
    CUBLAS_CHECK(cublasSetMathMode(cublas, CUBLAS_DEFAULT_MATH));
    CUDA_CHECK(cudaMalloc(&cublas_workspace, CUBLAS_WORKSPACE));
    CUBLAS_CHECK(cublasSetWorkspace(cublas, cublas_workspace, CUBLAS_WORKSPACE));
    selected = device;
    nhwc = switch_from_env("CIFAR10_CUDA_LAYOUT", "nhwc", "nchw");
    deterministic = switch_from_env("CIFAR10_CUDA_ALGOS", "deterministic", "fastest");
    small_conv = switch_from_env("CIFAR10_CUDA_SMALL_CONV", "ours", "cudnn");
    filters_ready = switch_from_env("CIFAR10_CUDA_FILTERS", "ready", "per-call");
    table.name = "cuda";
    table.nhwc = nhwc;
    table.alloc = cuda_alloc;
    table.free = cuda_free;
    table.upload = cuda_upload;
    table.download = cuda_download;
    table.host_alloc = cuda_host_alloc;
    table.host_free = cuda_host_free;
    table.event_create = cuda_event_create;
    table.event_destroy = cuda_event_destroy;
    table.input_upload_async = cuda_input_upload_async;
    table.upload_async = cuda_upload_async;
    table.download_async = cuda_download_async;
    table.download_queued = cuda_download_queued;
    table.compute_wait = cuda_compute_wait;
    table.event_done = cuda_event_done;
    table.event_wait = cuda_event_wait;
    table.timer_create = cuda_timer_create;
    table.timer_mark = cuda_timer_mark;
    table.timer_seconds = cuda_timer_seconds;
    table.sgd_update = cuda_sgd_update;
    table.lookahead_update = cuda_lookahead_update;
    table.scalars_set = cuda_scalars_set;
    table.patch_covariance = cuda_patch_covariance;
    table.capture_begin = cuda_capture_begin;
    table.capture_end = cuda_capture_end;
    table.graph_launch = cuda_graph_launch;
    table.graph_destroy = cuda_graph_destroy;
    table.shutdown = cuda_shutdown;
    fill_ops(&table, CUDA_FLOAT);
    bf16_table.name = NULL; /* made on its first request (cuda_bf16_table) */
    return &table;
}

static int bf16_native(void) {
    CHECK(selected >= 0);
    int major = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, selected));
    return major >= 8; /* bf16 tensor cores: Ampere (sm_80) and newer */
}

/* The bf16 table: the float one's memory, queues and updates, with bf16 activations, or with
 * float ones and bf16 copies for the products (CIFAR10_CUDA_BF16=copies, read here, so a typo
 * in it stops only bf16 runs). */
static const struct kernels *cuda_bf16_table(int device) {
    cuda_table(device);
    CHECK(bf16_native());
    if (!bf16_table.name) {
        bf16_table = table;
        bf16_table.name = "cuda-bf16";
        fill_ops(&bf16_table, bf16_precision());
    }
    return &bf16_table;
}

static void describe(char *buf, size_t size) {
    CHECK(selected >= 0);
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, selected));
    char pci[32];
    CUDA_CHECK(cudaDeviceGetPCIBusId(pci, sizeof pci, selected));
    /* The libraries actually loaded, which may differ from the headers built against: cuDNN 9
     * numbers itself major * 10000 + minor * 100 + patch. */
    size_t dnn = cudnnGetVersion();
    int driver = 0;
    CUDA_CHECK(cudaDriverGetVersion(&driver));
    snprintf(buf, size,
             "%s (sm_%d%d, %.1f GiB, PCI %s; driver for CUDA %d.%d, cuDNN %zu.%zu.%zu; convolutions %s, "
             "%s; activations %s%s; %s)",
             p.name, p.major, p.minor, (double)p.totalGlobalMem / (1u << 30), pci, driver / 1000,
             driver % 1000 / 10, dnn / 10000, dnn % 10000 / 100, dnn % 100,
             p.major < 8   ? "FP32"
             : cuda_tf32() ? "may use TF32 (NVIDIA_TF32_OVERRIDE=0: FP32 only)"
                           : "FP32 (NVIDIA_TF32_OVERRIDE=0)",
             deterministic ? "deterministic algorithms (CIFAR10_CUDA_ALGOS=fastest: any)"
                           : "the fastest algorithms, deterministic or not (CIFAR10_CUDA_ALGOS=fastest)",
             nhwc ? "NHWC (CIFAR10_CUDA_LAYOUT=nchw: NCHW)" : "NCHW (CIFAR10_CUDA_LAYOUT=nchw)",
             !nhwc ? ""
             : small_conv
                 ? "; few-channel forward and filter gradient (up to 256 outputs) ours "
                   "(CIFAR10_CUDA_SMALL_CONV=cudnn: cuDNN's)"
                 : "; few-channel forward and filter gradient cuDNN's (CIFAR10_CUDA_SMALL_CONV=cudnn)",
             filters_ready ? "filter conversions once per update (CIFAR10_CUDA_FILTERS=per-call: per call)"
                           : "filters converted per call (CIFAR10_CUDA_FILTERS=per-call)");
}

static int make_current(int device) {
    if (cudaSetDevice(device) == cudaSuccess) return 0;
    cudaGetLastError(); /* clear it: kernels_cuda(device) reports it, where a GPU run follows */
    return -1;
}

/* The plugin's one export (plugin.h): the six entry points of kernels/kernels.h. */

__attribute__((visibility("default"))) const struct cuda_plugin_api *cuda_plugin_api(void) {
    static const struct cuda_plugin_api api = {
        CUDA_PLUGIN_VERSION, sizeof(struct kernels), devices,  cuda_table,
        bf16_native,         cuda_bf16_table,        describe, make_current};
    return &api;
}
