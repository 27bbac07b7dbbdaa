/* cudaemu (cudaemu.h): the runtime, the launches, cuDNN's convolutions and cuBLAS's GEMMs on the
 * CPU. One process, one emulated device; each stream's work runs when CUDAEMU_STREAMS says,
 * except a capturing stream's, which is recorded for its graph. */
#include "cudaemu.h"

extern "C" {
#include "../../kernels/kernels.h"
}
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>
#include <unordered_set>
#include <vector>

/* ---- fibers: a block's threads, switched at __syncthreads ---- */

/* cudaemu_switch(save, to): saves the callee-saved registers and the stack pointer in *save, and
 * resumes the context whose stack pointer is `to` (x86-64 System V). */
extern "C" void cudaemu_switch(void **save, void *to);
asm(".text\n"
    ".globl cudaemu_switch\n"
    ".type cudaemu_switch,@function\n"
    "cudaemu_switch:\n"
    "    pushq %rbp\n    pushq %rbx\n    pushq %r12\n    pushq %r13\n    pushq %r14\n    pushq %r15\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    popq %r15\n    popq %r14\n    popq %r13\n    popq %r12\n    popq %rbx\n    popq %rbp\n"
    "    ret\n"
    ".size cudaemu_switch, .-cudaemu_switch\n");

namespace cudaemu {
const thread_ctx *cur;

[[noreturn]] void die(const char *what) {
    fprintf(stderr, "cudaemu: %s\n", what);
    abort();
}

/* The order environment variable var names (cudaemu.h): 0 for choice[0] (also when unset or
 * empty), 1 for choice[1], 2 for choice[2] alone or as choice[2]:SEED, which seeds *rng (seed 1
 * unless given); anything else stops the program. */
static int env_order(const char *var, const char *const choice[3], uint64_t *rng) {
    const char *v = getenv(var);
    if (!v || !*v || !strcmp(v, choice[0])) return 0;
    if (!strcmp(v, choice[1])) return 1;
    size_t n = strlen(choice[2]);
    unsigned long long seed = 1;
    char end;
    if (!strncmp(v, choice[2], n) &&
        (!v[n] || (v[n] == ':' && sscanf(v + n + 1, "%llu%c", &seed, &end) == 1))) {
        *rng = seed * 0x9e3779b97f4a7c15ull + 1;
        return 2;
    }
    fprintf(stderr, "cudaemu: %s: not %s, %s, %s or %s:SEED\n", var, choice[0], choice[1], choice[2],
            choice[2]);
    abort();
}

/* The next value of the xorshift64 generator *rng. */
static uint64_t next_random(uint64_t *rng) {
    *rng ^= *rng << 13, *rng ^= *rng >> 7, *rng ^= *rng << 17;
    return *rng;
}

namespace {
enum { STACK = 32 << 10, MAX_BLOCK = 1024, MAX_SHARED = 48 << 10 };

struct fiber {
    void *sp;
    thread_ctx ctx;
    int waiting, done;
};

struct block_run {
    void (*fn)(void *);
    void *arg;
    fiber *running;
    void *sched_sp;
    char *shared;
};
/* One grid runs at a time, whichever host thread launched it (run_grid's lock), so the state of
 * the running grid is global, as are the kernels' __shared__ arrays (cudaemu.h). */
std::mutex grid_lock;
block_run *block_now;
char *stacks;
size_t nstacks;
fiber fibers[MAX_BLOCK];
char shared_mem[MAX_SHARED] __attribute__((aligned(64)));

void fiber_main() {
    block_run *r = block_now;
    fiber *f = r->running;
    r->fn(r->arg);
    f->done = 1;
    cudaemu_switch(&f->sp, r->sched_sp);
    die("a finished thread resumed");
}

/* A new fiber's stack: six zero registers for cudaemu_switch to pop, then fiber_main as the
 * return address, entered with the stack as a call would leave it (rsp + 8 on 16 bytes). */
void *fiber_stack(size_t t) {
    /* (tops staggered by 64 bytes, so that they do not all fall in one set of the caches) */
    uintptr_t top = (uintptr_t)(stacks + (t + 1) * STACK - (t % 64) * 64);
    void **sp = (void **)(top - 64);
    for (int i = 0; i < 6; i++) sp[i] = nullptr;
    sp[6] = (void *)fiber_main;
    sp[7] = nullptr;
    return sp;
}

void stacks_for(size_t n) {
    if (n <= nstacks) return;
    if (stacks) munmap(stacks, nstacks * STACK);
    stacks = (char *)mmap(nullptr, n * STACK, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (stacks == MAP_FAILED) die("no memory for the fibers' stacks");
    for (size_t t = 0; t < n; t++) /* a guard page below each: an overflow faults */
        if (mprotect(stacks + t * STACK, 4096, PROT_NONE) != 0) die("mprotect failed");
    nstacks = n;
}

/* CUDAEMU_THREADS (cudaemu.h): the order of a grid's blocks, and of a block's threads between
 * two barriers. A kernel whose result depends on it has a race (CUDA promises neither). */
enum thread_order { THREADS_FORWARD, THREADS_REVERSE, THREADS_SHUFFLE }; /* (env_order's indices) */
uint64_t order_rng;
thread_order threads_order() {
    static const char *const choice[3] = {"forward", "reverse", "shuffle"};
    static const thread_order o = (thread_order)env_order("CUDAEMU_THREADS", choice, &order_rng);
    return o;
}

/* 0 .. n-1 in this run's order (a new shuffle each call). */
const std::vector<uint32_t> &in_order(size_t n) {
    static std::vector<uint32_t> at;
    at.resize(n);
    for (size_t i = 0; i < n; i++) at[i] = (uint32_t)i;
    if (threads_order() == THREADS_REVERSE) std::reverse(at.begin(), at.end());
    else if (threads_order() == THREADS_SHUFFLE)
        for (size_t i = n; i > 1; i--) /* Fisher-Yates */
            std::swap(at[i - 1], at[(next_random(&order_rng) >> 11) % i]);
    return at;
}

/* One block: every thread runs until it finishes or waits at __syncthreads; when all that have
 * not finished wait, they go on together. */
void run_block(block_run *r, dim3 block, dim3 grid, dim3 at) {
    size_t n = (size_t)block.x * block.y * block.z;
    for (size_t t = 0; t < n; t++) {
        fiber *f = &fibers[t];
        f->sp = fiber_stack(t);
        f->ctx.thread = dim3((unsigned)(t % block.x), (unsigned)(t / block.x % block.y),
                             (unsigned)(t / block.x / block.y));
        f->ctx.block = at, f->ctx.block_dim = block, f->ctx.grid_dim = grid;
        f->waiting = f->done = 0;
    }
    for (;;) {
        int waiting = 0;
        for (uint32_t t : in_order(n)) {
            fiber *f = &fibers[t];
            if (f->done) continue;
            f->waiting = 0;
            r->running = f;
            cur = &f->ctx;
            cudaemu_switch(&r->sched_sp, f->sp);
            waiting |= f->waiting;
        }
        if (!waiting) break;
        for (size_t t = 0; t < n; t++) /* CUDA: every thread of the block reaches each barrier */
            if (fibers[t].done) die("a thread returned while others of its block wait at __syncthreads");
    }
    cur = nullptr;
}
} // namespace

/* Kernels seen to run without __syncthreads: their threads run as plain calls, one after
 * another, with no fiber (most kernels; about 5x faster). One that synchronises after such a
 * launch stops the program. */
static std::unordered_set<const void *> sync_free;
static bool synced, fiberless;

void syncthreads() {
    block_run *r = block_now;
    if (!r || !r->running) die("__syncthreads outside a kernel");
    if (fiberless) die("a kernel called __syncthreads after launches that never did");
    synced = true;
    fiber *f = r->running;
    f->waiting = 1;
    cudaemu_switch(&f->sp, r->sched_sp);
}

void *dynamic_shared() { return shared_mem; }

static cudaError_t last_error = cudaSuccess;

bool launch_valid(dim3 grid, dim3 block, size_t shared) {
    size_t n = (size_t)block.x * block.y * block.z;
    if (n >= 1 && n <= MAX_BLOCK && block.z <= 64 && grid.x >= 1 && grid.y >= 1 && grid.z >= 1 &&
        grid.y <= 65535 && grid.z <= 65535 && shared <= MAX_SHARED)
        return true;
    fprintf(stderr, "cudaemu: launch of grid (%u, %u, %u), block (%u, %u, %u), %zu bytes shared: invalid\n",
            grid.x, grid.y, grid.z, block.x, block.y, block.z, shared);
    last_error = cudaErrorInvalidConfiguration;
    return false;
}

/* One block's threads as plain calls (a kernel known not to synchronise). */
static void run_block_direct(block_run *r, dim3 block, dim3 grid, dim3 at) {
    fiber *f = &fibers[0];
    f->ctx.block = at, f->ctx.block_dim = block, f->ctx.grid_dim = grid;
    r->running = f;
    cur = &f->ctx;
    for (uint32_t t : in_order((size_t)block.x * block.y * block.z)) {
        f->ctx.thread = dim3(t % block.x, t / block.x % block.y, t / block.x / block.y);
        r->fn(r->arg);
    }
    cur = nullptr;
}

/* CUDAEMU_TRACE=FILE: a line in FILE for each kernel and cuDNN or cuBLAS call as it runs (a
 * graph's at each launch) and each cudaSetDevice, the kernel as its object file and offset
 * (tests/cudaemu/trace.sh names them); NULL when not asked for. */
#define CHECK_TRACE(c) ((c) ? (void)0 : die("CUDAEMU_TRACE: " #c " failed"))
FILE *trace_file() {
    static FILE *f = []() -> FILE * {
        const char *path = getenv("CUDAEMU_TRACE");
        if (!path || !*path) return nullptr;
        FILE *t = fopen(path, "w");
        CHECK_TRACE(t != nullptr);
        setvbuf(t, nullptr, _IOLBF, 0);
        return t;
    }();
    return f;
}

void run_grid(const void *kernel, dim3 grid, dim3 block, size_t shared, void (*fn)(void *), void *arg) {
    std::lock_guard<std::mutex> one_grid(grid_lock);
    if (FILE *t = trace_file()) {
        Dl_info at;
        CHECK_TRACE(dladdr(kernel, &at) != 0);
        fprintf(t, "kernel %s+0x%lx grid %u,%u,%u block %u shared %zu\n", at.dli_fname,
                (unsigned long)((const char *)kernel - (const char *)at.dli_fbase), grid.x, grid.y, grid.z,
                block.x * block.y * block.z, shared);
    }
    if (block_now) die("a launch inside a kernel");
    stacks_for((size_t)block.x * block.y * block.z);
    block_run r = {fn, arg, nullptr, nullptr, shared_mem};
    block_now = &r;
    fiberless = sync_free.count(kernel) != 0;
    synced = false;
    /* (a copy: in_order's vector is reused by the blocks) */
    std::vector<uint32_t> blocks = in_order((size_t)grid.x * grid.y * grid.z);
    for (uint32_t b : blocks) {
        dim3 at(b % grid.x, b / grid.x % grid.y, b / grid.x / grid.y);
        /* Shared memory starts as garbage on a GPU: NaNs here, so a read before a write shows. */
        if (shared) memset(shared_mem, 0xff, shared);
        if (fiberless) run_block_direct(&r, block, grid, at);
        else run_block(&r, block, grid, at);
    }
    if (!synced) sync_free.insert(kernel);
    block_now = nullptr;
}

/* ---- streams and graphs ---- */
} // namespace cudaemu

/* A stream's queue of issued work not run yet (CUDAEMU_STREAMS lazy or random): items in issue
 * order, each a piece of work or a wait for another queue to have run `upto` items. */
struct cudaemu_queue {
    struct item {
        std::shared_ptr<cudaemu::work> w;    /* (null for a wait) */
        std::shared_ptr<cudaemu_queue> wait; /* (null for work) */
        uint64_t upto;
    };
    std::deque<item> items;
    uint64_t issued = 0, done = 0; /* items issued and run so far */
    bool running = false;
};
struct cudaemu_stream {
    unsigned flags;
    std::shared_ptr<cudaemu_queue> q;
};
struct cudaemu_event {
    double t; /* when its last record ran, in seconds */
    unsigned flags;
    /* Its last record outside a capture: the queue and the record's place in it (lazy, random). */
    std::shared_ptr<cudaemu_queue> q;
    uint64_t seq;
};
struct cudaemu_graph {
    std::vector<std::shared_ptr<cudaemu::work>> works;
};

namespace cudaemu {
static std::mutex lock;
static cudaStream_t capture_stream;
static std::thread::id capture_thread;
static cudaGraph_t capture_graph;

/* Whether this thread is capturing (then calls that would synchronise fail, as in CUDA's
 * thread-local capture mode). */
static bool this_thread_captures() {
    std::lock_guard<std::mutex> g(lock);
    return capture_stream && capture_thread == std::this_thread::get_id();
}

/* ---- when issued work runs (CUDAEMU_STREAMS, cudaemu.h) ---- */
enum order { LAZY, EAGER, RANDOM }; /* (env_order's indices) */
static std::recursive_mutex qlock;  /* the queues, and running what they hold */
static cudaemu_stream default_stream{0, std::make_shared<cudaemu_queue>()};
/* every stream, in the order of creation (so a seed gives the same order in every run) */
static std::vector<cudaemu_stream *> streams = {&default_stream};
static uint64_t rng;

static order streams_order() {
    static const char *const choice[3] = {"lazy", "eager", "random"};
    static const order o = (order)env_order("CUDAEMU_STREAMS", choice, &rng);
    return o;
}
static bool streams_deferred() { return streams_order() != EAGER; }

static cudaemu_stream *stream_of(cudaStream_t s) { return s ? s : &default_stream; }

/* Whether this thread is capturing s (its work then goes to the graph, never to a queue). */
static bool captures(cudaStream_t s) {
    std::lock_guard<std::mutex> g(lock);
    return s && s == capture_stream && capture_thread == std::this_thread::get_id();
}

/* Heap blocks of exactly the bytes asked for, aligned as CUDA's. */
static void *block_alloc(size_t bytes) {
    void *p = nullptr;
    return posix_memalign(&p, 256, bytes ? bytes : 1) == 0 ? p : nullptr;
}

/* ---- device memory (cudaemu.h: bounds, and the line between host and device) ----
 * Exact heap blocks by default (under ASan an access past the end is reported). With
 * CUDAEMU_DEVICE_MEMORY=guarded (not under ASan), each block is a mapping of its own, readable
 * and writable only while device work runs (device_open: an mprotect per block, so it costs
 * time in proportion to the blocks and the synchronisations), so host code touching it faults,
 * and the fault is named before the program dies of it. */
static bool guarded() {
#ifdef __SANITIZE_ADDRESS__
    return false;
#else
    static const bool g = []() {
        const char *v = getenv("CUDAEMU_DEVICE_MEMORY");
        if (!v || !*v || !strcmp(v, "heap")) return false;
        if (!strcmp(v, "guarded")) return true;
        die("CUDAEMU_DEVICE_MEMORY: not heap or guarded");
    }();
    return g;
#endif
}
static std::map<uintptr_t, size_t> device_blocks; /* start -> bytes mapped, while live (guarded) */
static int device_depth;                          /* device_open()s not closed yet */
static struct sigaction old_segv;

static void device_protect(int prot) {
    for (auto &blk : device_blocks)
        if (mprotect((void *)blk.first, blk.second, prot) != 0) die("mprotect of device memory failed");
}
/* While one lives, device memory is open to the thread's work (under qlock). */
struct device_open {
    std::lock_guard<std::recursive_mutex> g{qlock};
    device_open() {
        if (guarded() && device_depth++ == 0) device_protect(PROT_READ | PROT_WRITE);
    }
    ~device_open() {
        if (guarded() && --device_depth == 0) device_protect(PROT_NONE);
    }
};

/* A fault in closed device memory: says so, then lets the fault happen again under the handler
 * that was there before (by default: the program dies of SIGSEGV). The lookup and snprintf are
 * not async-signal-safe; a fault here ends the program either way. */
static void on_segv(int sig, siginfo_t *si, void *ctx) {
    (void)sig, (void)ctx;
    uintptr_t a = (uintptr_t)si->si_addr;
    auto it = device_blocks.upper_bound(a);
    if (device_depth == 0 && it != device_blocks.begin() && a < (--it)->first + it->second) {
        char msg[160];
        int n = snprintf(msg, sizeof msg,
                         "cudaemu: the host touched device memory at %p (a block of %zu bytes at %p)\n",
                         (void *)a, it->second, (void *)it->first);
        if (write(2, msg, (size_t)n) < 0) { /* nothing more to do */
        }
    }
    sigaction(SIGSEGV, &old_segv, nullptr);
}

static void *device_alloc(size_t bytes) {
    if (!guarded()) return block_alloc(bytes);
    static std::once_flag handler;
    std::call_once(handler, []() {
        struct sigaction sa = {};
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGSEGV, &sa, &old_segv) != 0) die("sigaction failed");
    });
    std::lock_guard<std::recursive_mutex> g(qlock);
    size_t len = bytes ? bytes : 1;
    void *p = mmap(nullptr, len, device_depth ? PROT_READ | PROT_WRITE : PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    device_blocks[(uintptr_t)p] = len;
    return p;
}
static void device_free(void *p) {
    if (!guarded()) return free(p);
    std::lock_guard<std::recursive_mutex> g(qlock);
    auto it = device_blocks.find((uintptr_t)p);
    if (it == device_blocks.end()) die("cudaFree of a pointer cudaMalloc did not return");
    munmap(p, it->second);
    device_blocks.erase(it);
}

/* Runs q's items until `upto` of them have run, each wait first running what it waits for. */
static void run_until(const std::shared_ptr<cudaemu_queue> &q, uint64_t upto) {
    std::lock_guard<std::recursive_mutex> g(qlock);
    if (q->done >= upto) return;
    if (q->running) die("a stream's work ran inside its own work");
    device_open open; /* (once for all the work that runs now) */
    while (q->done < upto) {
        cudaemu_queue::item it = q->items.front();
        q->items.pop_front();
        q->running = true;
        if (it.wait) run_until(it.wait, it.upto);
        if (it.w) it.w->run();
        q->running = false;
        q->done++;
    }
}
static void run_stream(cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> g(qlock);
    cudaemu_stream *st = stream_of(s);
    run_until(st->q, st->q->issued);
}
static void run_all() {
    std::lock_guard<std::recursive_mutex> g(qlock);
    for (cudaemu_stream *st : streams) run_until(st->q, st->q->issued);
}

/* random: some of the time, the work waiting in a stream picked at random runs now, its older
 * neighbours in the other streams left waiting (a missing wait between streams then shows). */
static void run_some() {
    if (next_random(&rng) % 4) return;
    std::vector<cudaemu_stream *> pending;
    for (cudaemu_stream *st : streams)
        if (st->q->done < st->q->issued) pending.push_back(st);
    if (pending.empty()) return;
    cudaemu_stream *st = pending[(rng >> 8) % pending.size()];
    run_until(st->q, st->q->done + 1 + (rng >> 24) % (st->q->issued - st->q->done));
}

/* Appends an item to s's queue; returns its place (the count of items issued on s with it). */
static uint64_t enqueue(cudaStream_t s, std::shared_ptr<work> w, std::shared_ptr<cudaemu_queue> wait,
                        uint64_t upto) {
    std::lock_guard<std::recursive_mutex> g(qlock);
    cudaemu_stream *st = stream_of(s);
    st->q->items.push_back(cudaemu_queue::item{std::move(w), std::move(wait), upto});
    uint64_t seq = ++st->q->issued;
    if (streams_order() == RANDOM) run_some();
    return seq;
}

void submit(cudaStream_t s, work *w) {
    {
        std::lock_guard<std::mutex> g(lock);
        if (s && s == capture_stream) {
            if (capture_thread != std::this_thread::get_id())
                die("work issued on a capturing stream by another thread");
            capture_graph->works.push_back(std::shared_ptr<work>(w));
            return;
        }
    }
    if (streams_deferred()) {
        enqueue(s, std::shared_ptr<work>(w), nullptr, 0);
        return;
    }
    {
        device_open open;
        w->run();
    }
    delete w;
}

static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
} // namespace cudaemu

using cudaemu::issue;

#define UNSAFE_IN_CAPTURE()                                                                                  \
    do {                                                                                                     \
        if (cudaemu::this_thread_captures()) return cudaErrorStreamCaptureUnsupported;                       \
    } while (0)

cudaError_t cudaGetLastError(void) {
    cudaError_t e = cudaemu::last_error;
    cudaemu::last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return cudaemu::last_error; }

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    default: return "cudaemu error";
    }
}

/* CUDAEMU_GPUS=N (1 to 16; 1 unless set): the GPUs the emulation shows, all of them the same
 * CPU and memory, so a program's choice among them is seen (CUDAEMU_TRACE's "set device"). */
static int emulated_gpus() {
    static const int n = []() {
        const char *v = getenv("CUDAEMU_GPUS");
        if (!v || !*v) return 1;
        char *end;
        long g = strtol(v, &end, 10);
        if (*end || g < 1 || g > 16) {
            fprintf(stderr, "cudaemu: CUDAEMU_GPUS=%s: expected 1 to 16\n", v);
            exit(1);
        }
        return (int)g;
    }();
    return n;
}
/* Whether the process's MPI library has started (MPI_Initialized, looked up in the program,
 * which links MPI or not): -1 where it has none. */
static int mpi_started() {
    int (*initialized)(int *);
    *(void **)&initialized = dlsym(RTLD_DEFAULT, "MPI_Initialized");
    int flag = 0;
    return initialized && initialized(&flag) == 0 ? flag : -1;
}
static bool valid_device(int d) { return d >= 0 && d < emulated_gpus(); }

cudaError_t cudaGetDeviceCount(int *n) { return *n = emulated_gpus(), cudaSuccess; }
cudaError_t cudaDriverGetVersion(int *v) { return *v = CUDART_VERSION, cudaSuccess; }
cudaError_t cudaSetDevice(int d) {
    if (FILE *t = cudaemu::trace_file()) {
        int mpi = mpi_started();
        fprintf(t, "set device %d%s\n", d, mpi < 0 ? "" : mpi ? " (MPI started)" : " (before MPI)");
    }
    return valid_device(d) ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaDeviceReset(void) {
    cudaemu::run_all();
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    UNSAFE_IN_CAPTURE();
    cudaemu::run_all();
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    if (!valid_device(d)) return cudaErrorInvalidValue;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cudaemu, the CUDA backend emulated on the CPU");
    p->totalGlobalMem = (size_t)16 << 30;
    p->major = 9, p->minor = 0, p->multiProcessorCount = 1;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d) {
    if (!valid_device(d)) return cudaErrorInvalidValue;
    *v = a == cudaDevAttrComputeCapabilityMajor ? 9 : 0;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char *buf, int len, int d) {
    if (!valid_device(d)) return cudaErrorInvalidValue;
    snprintf(buf, (size_t)len, "none (emulated)");
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b) {
    *free_b = *total_b = (size_t)16 << 30;
    return cudaSuccess;
}

/* Device memory is uninitialised on a GPU: here it starts as NaNs (all bits set), so a kernel that
 * reads what nothing wrote sees them. */
cudaError_t cudaMalloc(void **p, size_t bytes) {
    UNSAFE_IN_CAPTURE();
    *p = cudaemu::device_alloc(bytes);
    if (!*p) return cudaErrorMemoryAllocation;
    cudaemu::device_open open;
    memset(*p, 0xff, bytes);
    return cudaSuccess;
}
/* (cudaFree and cudaFreeHost wait for the device, as CUDA's do) */
cudaError_t cudaFree(void *p) {
    UNSAFE_IN_CAPTURE();
    cudaemu::run_all();
    if (p) cudaemu::device_free(p);
    return cudaSuccess;
}

/* Page-locked host memory: its start and end, to tell it from pageable memory in copies. */
static std::mutex pinned_lock;
static std::map<uintptr_t, uintptr_t> pinned;
static bool is_pinned(const void *p, size_t bytes) {
    std::lock_guard<std::mutex> g(pinned_lock);
    auto it = pinned.upper_bound((uintptr_t)p);
    return it != pinned.begin() && (uintptr_t)p + bytes <= (--it)->second;
}
cudaError_t cudaMallocHost(void **p, size_t bytes) {
    UNSAFE_IN_CAPTURE();
    *p = cudaemu::block_alloc(bytes);
    if (!*p) return cudaErrorMemoryAllocation;
    std::lock_guard<std::mutex> g(pinned_lock);
    pinned[(uintptr_t)*p] = (uintptr_t)*p + bytes;
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
    UNSAFE_IN_CAPTURE();
    cudaemu::run_all();
    {
        std::lock_guard<std::mutex> g(pinned_lock);
        pinned.erase((uintptr_t)p);
    }
    free(p);
    return cudaSuccess;
}

/* Deferred streams (lazy, random) keep CUDA's rules for pageable host memory: a copy from it
 * reads it before the call returns (here: a snapshot, copied when the copy runs), and a copy
 * into it has finished when the call returns (its stream runs up to it). Page-locked memory is
 * read and written when the copy runs. A copy with pageable host memory captured into a graph
 * fails here (the backend's rule, stricter than CUDA, which records it: each replay would then
 * copy with none of that ordering with the host, after the memory may be gone). */
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
    if (cudaemu::captures(s) && ((kind == cudaMemcpyHostToDevice && !is_pinned(src, bytes)) ||
                                 (kind == cudaMemcpyDeviceToHost && !is_pinned(dst, bytes)))) {
        fprintf(stderr, "cudaemu: cudaMemcpyAsync with pageable host memory captured into a graph\n");
        return cudaErrorInvalidValue;
    }
    bool deferred = cudaemu::streams_deferred() && !cudaemu::captures(s);
    if (deferred && kind == cudaMemcpyHostToDevice && !is_pinned(src, bytes)) {
        auto copy = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + bytes);
        issue(s, [=]() { memcpy(dst, copy->data(), bytes); });
        return cudaSuccess;
    }
    issue(s, [=]() { memmove(dst, src, bytes); });
    if (deferred && kind == cudaMemcpyDeviceToHost && !is_pinned(dst, bytes)) cudaemu::run_stream(s);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t s) {
    issue(s, [=]() { memset(dst, value, bytes); });
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    *s = new cudaemu_stream{flags, std::make_shared<cudaemu_queue>()};
    std::lock_guard<std::recursive_mutex> g(cudaemu::qlock);
    cudaemu::streams.push_back(*s);
    return cudaSuccess;
}
/* (Its work still runs, as in CUDA: here before the call returns.) */
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> g(cudaemu::qlock);
    cudaemu::run_stream(s);
    cudaemu::streams.erase(std::find(cudaemu::streams.begin(), cudaemu::streams.end(), s));
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    UNSAFE_IN_CAPTURE();
    cudaemu::run_stream(s);
    return cudaSuccess;
}
/* The wait is for the event's last record before this call (none: no wait), as in CUDA. */
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    (void)flags;
    std::lock_guard<std::recursive_mutex> g(cudaemu::qlock);
    if (cudaemu::streams_deferred() && e->q && !cudaemu::captures(s))
        cudaemu::enqueue(s, nullptr, e->q, e->seq);
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    *e = new cudaemu_event{0.0, flags, nullptr, 0};
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    std::lock_guard<std::recursive_mutex> g(cudaemu::qlock);
    if (e->q) cudaemu::run_until(e->q, e->seq); /* (a record still queued refers to it) */
    delete e;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> g(cudaemu::qlock);
    if (!cudaemu::streams_deferred() || cudaemu::captures(s)) {
        issue(s, [e]() { e->t = cudaemu::now(); });
        return cudaSuccess;
    }
    auto w = std::make_shared<cudaemu::work_of<std::function<void()>>>([e]() { e->t = cudaemu::now(); });
    e->q = cudaemu::stream_of(s)->q;
    e->seq = cudaemu::enqueue(s, w, nullptr, 0);
    return cudaSuccess;
}
/* Deferred streams: an event whose work has not run is not ready; that work then runs, so a
 * caller that polls sees it ready next time. */
cudaError_t cudaEventQuery(cudaEvent_t e) {
    UNSAFE_IN_CAPTURE();
    std::lock_guard<std::recursive_mutex> g(cudaemu::qlock);
    if (!e->q || e->q->done >= e->seq) return cudaSuccess;
    cudaemu::run_until(e->q, e->seq);
    /* "not ready" kept as the last error too, as a runtime may (HIP's does): a caller that
     * leaves it there sees it at its next launch check */
    cudaemu::last_error = cudaErrorNotReady;
    return cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    UNSAFE_IN_CAPTURE();
    std::lock_guard<std::recursive_mutex> g(cudaemu::qlock);
    if (e->q) cudaemu::run_until(e->q, e->seq);
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t from, cudaEvent_t to) {
    if ((from->flags | to->flags) & cudaEventDisableTiming) return cudaErrorInvalidValue;
    std::lock_guard<std::recursive_mutex> g(cudaemu::qlock);
    for (cudaEvent_t e : {from, to})
        if (e->q && e->q->done < e->seq) return cudaErrorNotReady;
    *ms = (float)(1e3 * (to->t - from->t));
    return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
    (void)mode;
    std::lock_guard<std::mutex> g(cudaemu::lock);
    if (!s || cudaemu::capture_stream) return cudaErrorIllegalState;
    cudaemu::capture_stream = s;
    cudaemu::capture_thread = std::this_thread::get_id();
    cudaemu::capture_graph = new cudaemu_graph;
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    std::lock_guard<std::mutex> l(cudaemu::lock);
    if (s != cudaemu::capture_stream || cudaemu::capture_thread != std::this_thread::get_id())
        return cudaErrorIllegalState;
    *g = cudaemu::capture_graph;
    cudaemu::capture_stream = nullptr, cudaemu::capture_graph = nullptr;
    const char *fail = getenv("CUDAEMU_CAPTURE");
    if (fail && !strcmp(fail, "invalidated")) { /* as CUDA after a call the capture refused */
        delete *g;
        *g = nullptr;
        return cudaErrorStreamCaptureInvalidated;
    }
    if (fail && *fail) {
        fprintf(stderr, "cudaemu: CUDAEMU_CAPTURE=%s: expected invalidated or nothing\n", fail);
        exit(1);
    }
    return cudaSuccess;
}
cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t *nodes, size_t *count) {
    if (nodes) return cudaErrorInvalidValue; /* (only the count is asked for) */
    *count = g->works.size();
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g, unsigned long long flags) {
    (void)flags;
    UNSAFE_IN_CAPTURE();
    *exec = new cudaemu_graph(*g);
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    delete g;
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    UNSAFE_IN_CAPTURE();
    delete exec;
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
    std::shared_ptr<cudaemu_graph> copy = std::make_shared<cudaemu_graph>(*exec);
    issue(s, [copy]() {
        for (auto &w : copy->works) w->run();
    });
    return cudaSuccess;
}

/* ---- element access for cuDNN and cuBLAS ---- */
static double load(const void *p, size_t i, int bf16) {
    return bf16 ? (double)__bfloat162float(((const __nv_bfloat16 *)p)[i]) : (double)((const float *)p)[i];
}
static void store(void *p, size_t i, int bf16, double v, double beta) {
    if (beta != 0.0) v += beta * load(p, i, bf16);
    if (bf16) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v);
    else ((float *)p)[i] = (float)v;
}

/* ---- cuDNN: plain convolutions, sums in double ---- */
struct cudaemu_cudnn {
    cudaStream_t stream;
};
struct cudaemu_tensor {
    int format, bf16, n, c, h, w; /* a filter: n = K, c = C, h x w the kernel */
    size_t at(int n_, int c_, int y, int x) const {
        return format == CUDNN_TENSOR_NHWC ? (((size_t)n_ * h + y) * w + x) * c + c_
                                           : (((size_t)n_ * c + c_) * h + y) * w + x;
    }
};
struct cudaemu_convdesc {
    int pad_h, pad_w, u, v, dil_h, dil_w, mode, set;
    cudnnMathType_t math;
};

const char *cudnnGetErrorString(cudnnStatus_t s) {
    switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    default: return "cudaemu cuDNN error";
    }
}
size_t cudnnGetVersion(void) { return 0; }
cudnnStatus_t cudnnCreate(cudnnHandle_t *h) { return *h = new cudaemu_cudnn{nullptr}, CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnDestroy(cudnnHandle_t h) { return delete h, CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) { return h->stream = s, CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d) {
    return *d = new cudaemu_tensor{}, CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
    return delete d, CUDNN_STATUS_SUCCESS;
}
static cudnnStatus_t tensor_set(cudaemu_tensor *d, cudnnTensorFormat_t f, cudnnDataType_t t, int n, int c,
                                int h, int w) {
    if ((f != CUDNN_TENSOR_NCHW && f != CUDNN_TENSOR_NHWC) ||
        (t != CUDNN_DATA_FLOAT && t != CUDNN_DATA_BFLOAT16) || n < 1 || c < 1 || h < 1 || w < 1)
        return CUDNN_STATUS_BAD_PARAM;
    *d = cudaemu_tensor{(int)f, t == CUDNN_DATA_BFLOAT16, n, c, h, w};
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t f, cudnnDataType_t t,
                                         int n, int c, int h, int w) {
    return tensor_set(d, f, t, n, c, h, w);
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d) {
    return *d = new cudaemu_tensor{}, CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) {
    return delete d, CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t f,
                                         int k, int c, int h, int w) {
    return tensor_set(d, f, t, k, c, h, w);
}
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d) {
    return *d = new cudaemu_convdesc{}, CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
    return delete d, CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w, int u,
                                              int v, int dil_h, int dil_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
    if (pad_h < 0 || pad_w < 0 || u != 1 || v != 1 || dil_h != 1 || dil_w != 1 || compute != CUDNN_DATA_FLOAT)
        return CUDNN_STATUS_NOT_SUPPORTED; /* (the backend's convolutions only) */
    d->pad_h = pad_h, d->pad_w = pad_w, d->u = u, d->v = v, d->dil_h = dil_h, d->dil_w = dil_w;
    d->mode = mode, d->set = 1;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m) {
    return d->math = m, CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t x,
                                                    cudnnFilterDescriptor_t w, int *n, int *k, int *h,
                                                    int *wo) {
    if (x->c != w->c) return CUDNN_STATUS_BAD_PARAM;
    *n = x->n, *k = w->n, *h = x->h + 2 * c->pad_h - w->h + 1, *wo = x->w + 2 * c->pad_w - w->w + 1;
    return CUDNN_STATUS_SUCCESS;
}

/* The shapes of one convolution agree: x [N][C][H][W], w [K][C][R][S], y [N][K][Ho][Wo], one
 * element type, a cross-correlation. */
static bool conv_ok(const cudaemu_tensor *x, const cudaemu_tensor *w, const cudaemu_convdesc *c,
                    const cudaemu_tensor *y) {
    return c->set && c->mode == CUDNN_CROSS_CORRELATION && x->c == w->c && y->n == x->n && y->c == w->n &&
           y->h == x->h + 2 * c->pad_h - w->h + 1 && y->w == x->w + 2 * c->pad_w - w->w + 1 &&
           x->bf16 == w->bf16 && x->bf16 == y->bf16 && x->format == y->format && w->format == x->format;
}

/* Two algorithms per pass, both deterministic: the first (the "fastest") needs a workspace, which
 * it fills with garbage as it runs (so an overlap with the caller's buffers shows), the second
 * none. */
static size_t conv_ws(const cudaemu_tensor *x, const cudaemu_tensor *y) {
    return ((size_t)x->n * x->c * x->h * x->w + (size_t)y->n * y->c * y->h * y->w) * 2 + 4096;
}
template <typename Perf, typename Algo>
static void two_algos(Perf *r, int want, int *got, size_t ws, Algo first, Algo second,
                      cudnnConvolutionDescriptor_t c) {
    Perf a = {first, CUDNN_STATUS_SUCCESS, 0.5f, ws, CUDNN_DETERMINISTIC, c->math};
    Perf b = {second, CUDNN_STATUS_SUCCESS, 1.0f, 0, CUDNN_DETERMINISTIC, c->math};
    *got = 0;
    if (want > 0) r[(*got)++] = a;
    if (want > 1) r[(*got)++] = b;
}
cudnnStatus_t cudnnFindConvolutionForwardAlgorithm(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                   cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t c,
                                                   cudnnTensorDescriptor_t y, int want, int *got,
                                                   cudnnConvolutionFwdAlgoPerf_t *r) {
    (void)h;
    if (cudaemu::this_thread_captures()) return CUDNN_STATUS_NOT_SUPPORTED; /* it allocates and waits */
    if (!conv_ok(x, w, c, y)) return CUDNN_STATUS_BAD_PARAM;
    two_algos(r, want, got, conv_ws(x, y), (cudnnConvolutionFwdAlgo_t)1,
              CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, c);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithm(cudnnHandle_t h, cudnnFilterDescriptor_t w,
                                                        cudnnTensorDescriptor_t dy,
                                                        cudnnConvolutionDescriptor_t c,
                                                        cudnnTensorDescriptor_t dx, int want, int *got,
                                                        cudnnConvolutionBwdDataAlgoPerf_t *r) {
    (void)h;
    if (cudaemu::this_thread_captures()) return CUDNN_STATUS_NOT_SUPPORTED; /* it allocates and waits */
    if (!conv_ok(dx, w, c, dy)) return CUDNN_STATUS_BAD_PARAM;
    two_algos(r, want, got, conv_ws(dx, dy), CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
              (cudnnConvolutionBwdDataAlgo_t)0, c);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithm(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                          cudnnTensorDescriptor_t dy,
                                                          cudnnConvolutionDescriptor_t c,
                                                          cudnnFilterDescriptor_t dw, int want, int *got,
                                                          cudnnConvolutionBwdFilterAlgoPerf_t *r) {
    (void)h;
    if (cudaemu::this_thread_captures()) return CUDNN_STATUS_NOT_SUPPORTED; /* it allocates and waits */
    if (!conv_ok(x, dw, c, dy)) return CUDNN_STATUS_BAD_PARAM;
    two_algos(r, want, got, conv_ws(x, dy), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
              (cudnnConvolutionBwdFilterAlgo_t)0, c);
    return CUDNN_STATUS_SUCCESS;
}

/* The algorithm's workspace need met, then scribbled on (algorithm 1 only; see two_algos). */
static cudnnStatus_t workspace(int algo, size_t need, void *ws, size_t ws_bytes) {
    if (algo != 1) return algo == 0 ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
    if (ws_bytes < need || !ws) return CUDNN_STATUS_BAD_PARAM;
    memset(ws, 0xa5, need);
    return CUDNN_STATUS_SUCCESS;
}

enum { PASS_FWD, PASS_DATA, PASS_FILTER };
/* The program's CPU backend (kernels_cpu, which CUDA=emu builds export to the plugin). */
static const struct kernels *cpu_backend() {
    static const struct kernels *cpu;
    if (!cpu) {
        const struct kernels *(*make)(void);
        *(void **)&make = dlsym(RTLD_DEFAULT, "kernels_cpu");
        if (!make) cudaemu::die("the program does not export kernels_cpu (a CUDA=emu build does)");
        cpu = make();
    }
    return cpu;
}

/* t as float [n][c][h][w] (zeros for a NULL p: an operand the pass does not read). */
static std::vector<float> nchw_of(const cudaemu_tensor &t, const void *p) {
    std::vector<float> v((size_t)t.n * t.c * t.h * t.w, 0.0f);
    if (!p) return v;
    size_t i = 0;
    for (int n = 0; n < t.n; n++)
        for (int c = 0; c < t.c; c++)
            for (int y = 0; y < t.h; y++)
                for (int x = 0; x < t.w; x++) v[i++] = (float)load(p, t.at(n, c, y, x), t.bf16);
    return v;
}

/* One pass of the convolution x (*) w = y: y, dx or dw = alpha * the pass + beta * the old value,
 * the pass carried out in float by the program's CPU backend on NCHW copies (tested against
 * double precision by test_ops), its result stored in the descriptor's layout and type. */
static void conv_pass(int pass, cudaemu_tensor x, const void *xp, cudaemu_tensor w, const void *wp,
                      cudaemu_tensor y, const void *yp, void *out, double alpha, double beta, int ph,
                      int pw) {
    if (w.h != w.w || ph != pw || w.h > 5 || ph >= w.h)
        cudaemu::die("a convolution beyond the CPU backend's contract");
    const struct kernels *cpu = cpu_backend();
    struct conv_shape sh = {x.n, x.c, w.n, x.h, x.w, w.h, ph};
    static const unsigned bits[] = {CONV_FORWARD, CONV_BACKWARD_DATA, CONV_BACKWARD_FILTER};
    size_t ws_bytes = cpu->conv_workspace(&sh, bits[pass]);
    void *ws = cpu->alloc(ws_bytes);
    std::vector<float> xf = nchw_of(x, xp), wf = nchw_of(w, wp), yf = nchw_of(y, yp);
    const cudaemu_tensor &res = pass == PASS_FWD ? y : pass == PASS_DATA ? x : w;
    std::vector<float> rf((size_t)res.n * res.c * res.h * res.w);
    if (pass == PASS_FWD)
        cpu->conv_forward(&sh, xf.data(), wf.data(), nullptr, rf.data(), CONV_ACT_NONE, ws, ws_bytes);
    else if (pass == PASS_DATA)
        cpu->conv_backward(&sh, xf.data(), wf.data(), yf.data(), rf.data(), nullptr, nullptr, nullptr, ws,
                           ws_bytes);
    else
        cpu->conv_backward(&sh, xf.data(), wf.data(), yf.data(), nullptr, rf.data(), nullptr, nullptr, ws,
                           ws_bytes);
    cpu->free(ws);
    size_t i = 0;
    for (int n = 0; n < res.n; n++)
        for (int c = 0; c < res.c; c++)
            for (int yy = 0; yy < res.h; yy++)
                for (int xx = 0; xx < res.w; xx++)
                    store(out, res.at(n, c, yy, xx), res.bf16, alpha * rf[i++], beta);
}

static cudnnStatus_t conv_issue(cudnnHandle_t h, int pass, const void *alpha, cudnnTensorDescriptor_t xd,
                                const void *x, cudnnFilterDescriptor_t wd, const void *w,
                                cudnnTensorDescriptor_t yd, const void *y, cudnnConvolutionDescriptor_t c,
                                int algo, void *ws, size_t ws_bytes, const void *beta, void *out) {
    if (!conv_ok(xd, wd, c, yd)) return CUDNN_STATUS_BAD_PARAM;
    size_t need = conv_ws(xd, yd);
    if (algo == 1 && (ws_bytes < need || !ws)) return CUDNN_STATUS_BAD_PARAM;
    if (algo != 0 && algo != 1) return CUDNN_STATUS_BAD_PARAM;
    double a = *(const float *)alpha, b = *(const float *)beta;
    cudaemu_tensor X = *xd, Wt = *wd, Y = *yd;
    int ph = c->pad_h, pw = c->pad_w;
    issue(h->stream, [=]() {
        if (FILE *t = cudaemu::trace_file())
            fprintf(t, "cudnn %s x %dx%dx%dx%d w %dx%dx%dx%d y %dx%dx%dx%d %s %s algo %d\n",
                    pass == PASS_FWD    ? "forward"
                    : pass == PASS_DATA ? "backward-data"
                                        : "backward-filter",
                    X.n, X.c, X.h, X.w, Wt.n, Wt.c, Wt.h, Wt.w, Y.n, Y.c, Y.h, Y.w, X.bf16 ? "bf16" : "float",
                    X.format == CUDNN_TENSOR_NHWC ? "nhwc" : "nchw", algo);
        workspace(algo, need, ws, ws_bytes);
        conv_pass(pass, X, x, Wt, w, Y, y, out, a, b, ph, pw);
        workspace(algo, need, ws, ws_bytes); /* again: a workspace over the result shows too */
    });
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha, cudnnTensorDescriptor_t xd,
                                      const void *x, cudnnFilterDescriptor_t wd, const void *w,
                                      cudnnConvolutionDescriptor_t c, cudnnConvolutionFwdAlgo_t algo,
                                      void *ws, size_t ws_bytes, const void *beta, cudnnTensorDescriptor_t yd,
                                      void *y) {
    return conv_issue(h, PASS_FWD, alpha, xd, x, wd, w, yd, nullptr, c, (int)algo, ws, ws_bytes, beta, y);
}
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha, cudnnFilterDescriptor_t wd,
                                           const void *w, cudnnTensorDescriptor_t dyd, const void *dy,
                                           cudnnConvolutionDescriptor_t c, cudnnConvolutionBwdDataAlgo_t algo,
                                           void *ws, size_t ws_bytes, const void *beta,
                                           cudnnTensorDescriptor_t dxd, void *dx) {
    return conv_issue(h, PASS_DATA, alpha, dxd, nullptr, wd, w, dyd, dy, c, (int)algo, ws, ws_bytes, beta,
                      dx);
}
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha, cudnnTensorDescriptor_t xd,
                                             const void *x, cudnnTensorDescriptor_t dyd, const void *dy,
                                             cudnnConvolutionDescriptor_t c,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void *ws, size_t ws_bytes,
                                             const void *beta, cudnnFilterDescriptor_t dwd, void *dw) {
    return conv_issue(h, PASS_FILTER, alpha, xd, x, dwd, nullptr, dyd, dy, c, (int)algo, ws, ws_bytes, beta,
                      dw);
}

/* ---- cuBLAS: column-major GEMMs, sums in double ---- */
struct cudaemu_cublas {
    cudaStream_t stream;
};
cublasStatus_t cublasCreate(cublasHandle_t *h) {
    return *h = new cudaemu_cublas{nullptr}, CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) { return delete h, CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    return h->stream = s, CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
    (void)h, (void)m;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes) {
    (void)h, (void)ws, (void)bytes;
    return CUBLAS_STATUS_SUCCESS;
}

/* C (m x n) = alpha op(A) op(B) + beta C; round: the float operands rounded to bf16 first. */
static cublasStatus_t gemm_issue(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                 int k, double alpha, const void *A, int a16, int lda, const void *B, int b16,
                                 int ldb, double beta, void *C, int c16, int ldc, int round) {
    if (m < 0 || n < 0 || k < 0 || lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n) ||
        ldc < m || lda < 1 || ldb < 1 || ldc < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    issue(h->stream, [=]() {
        if (FILE *t = cudaemu::trace_file())
            fprintf(t, "cublas gemm m %d n %d k %d%s%s\n", m, n, k, ta == CUBLAS_OP_T ? " A^T" : "",
                    tb == CUBLAS_OP_T ? " B^T" : "");
        /* op(A) as m x k and op(B) as k x n, column-major doubles (bf16-rounded where asked) */
        auto get = [round](const void *p, size_t i, int bf16) {
            double v = load(p, i, bf16);
            return round && !bf16 ? (double)__bfloat162float(__float2bfloat16_rn((float)v)) : v;
        };
        std::vector<double> a((size_t)m * k), b((size_t)k * n), c(m);
        for (int l = 0; l < k; l++)
            for (int i = 0; i < m; i++)
                a[i + (size_t)l * m] =
                    get(A, ta == CUBLAS_OP_N ? i + (size_t)l * lda : l + (size_t)i * lda, a16);
        for (int j = 0; j < n; j++)
            for (int l = 0; l < k; l++)
                b[l + (size_t)j * k] =
                    get(B, tb == CUBLAS_OP_N ? l + (size_t)j * ldb : j + (size_t)l * ldb, b16);
        for (int j = 0; j < n; j++) {
            std::fill(c.begin(), c.end(), 0.0);
            for (int l = 0; l < k; l++) {
                double bl = b[l + (size_t)j * k];
                const double *al = &a[(size_t)l * m];
                for (int i = 0; i < m; i++) c[i] += al[i] * bl;
            }
            for (int i = 0; i < m; i++) store(C, i + (size_t)j * ldc, c16, alpha * c[i], beta);
        }
    });
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda, const float *B, int ldb,
                           const float *beta, float *C, int ldc) {
    return gemm_issue(h, ta, tb, m, n, k, *alpha, A, 0, lda, B, 0, ldb, *beta, C, 0, ldc, 0);
}
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType_t at, int lda, const void *B,
                            cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    (void)algo;
    if (compute == CUBLAS_COMPUTE_32F_FAST_16BF && (at != CUDA_R_32F || bt != CUDA_R_32F))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (compute == CUBLAS_COMPUTE_32F && at != bt) return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm_issue(h, ta, tb, m, n, k, *(const float *)alpha, A, at == CUDA_R_16BF, lda, B,
                      bt == CUDA_R_16BF, ldb, *(const float *)beta, C, ct == CUDA_R_16BF, ldc,
                      compute == CUBLAS_COMPUTE_32F_FAST_16BF);
}
