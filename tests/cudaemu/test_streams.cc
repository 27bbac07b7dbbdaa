/* test_streams: when cudaemu runs issued work, in each order CUDAEMU_STREAMS names (cudaemu.h).
 * Every order keeps CUDA's guarantees (a wait on an event, a synchronisation, pageable host
 * memory read at the call and written by its return); lazy and random also show what CUDA does
 * not guarantee (work on another stream not waited for has not run; a queried event not ready
 * yet); eager runs all at issue. With CUDAEMU_DEVICE_MEMORY=guarded, device memory faults when
 * the host touches it, and the fault is named. Ends with "test_streams (ORDER): N passed, M
 * failed". */
#include "cudaemu.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

static int passed, failed;
static void check(bool ok, const char *what) {
    if (ok) passed++;
    else {
        failed++;
        fprintf(stderr, "FAIL: %s\n", what);
    }
}
#define CU(call) ((call) == cudaSuccess ? (void)0 : (fprintf(stderr, "%s failed\n", #call), exit(1)))

static unsigned char first_byte(const void *p) { return *(const unsigned char *)p; }

/* stderr to /dev/null until restore_stderr(the returned descriptor). */
static int quiet_stderr() {
    fflush(stderr);
    int saved = dup(2), null = open("/dev/null", O_WRONLY);
    if (saved < 0 || null < 0 || dup2(null, 2) < 0) exit(1);
    close(null);
    return saved;
}
static void restore_stderr(int saved) {
    fflush(stderr);
    if (dup2(saved, 2) < 0) exit(1);
    close(saved);
}

/* Whether a child process reading dev dies of SIGSEGV after cudaemu's line naming it. */
static bool host_touch_dies(const void *dev) {
    int fd[2];
    if (pipe(fd) != 0) return false;
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        volatile unsigned char v = *(const volatile unsigned char *)dev;
        (void)v;
        _exit(0);
    }
    close(fd[1]);
    char buf[512] = {0};
    size_t got = 0;
    for (ssize_t n; got < sizeof buf - 1 && (n = read(fd[0], buf + got, sizeof buf - 1 - got)) > 0;) got += n;
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV &&
           strstr(buf, "cudaemu: the host touched device memory at") != nullptr;
}

/* Each thread's turn, counted as the emulation runs them: before and after a barrier. */
static int turn;
enum { BLOCKS = 16, THREADS = 64, SLOTS = BLOCKS * THREADS };
static void turns_kernel(int *before, int *after) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    before[i] = turn++;
    __syncthreads();
    after[i] = turn++;
}

/* a[i] = a[i + 1] in place: a race (thread i reads what thread i + 1 writes), which running the
 * threads in index order hides. */
static void shift_kernel(int *a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i + 1 < n) a[i] = a[i + 1];
}

/* Whether one phase's turns t[SLOTS] (block b's place in the grid's order times THREADS plus
 * the thread's place in its block's order) follow CUDAEMU_THREADS: forward, blocks and their
 * threads in index order; reverse, both the other way round; shuffle, neither. */
static bool turns_follow(const std::vector<int> &t, const std::string &order) {
    bool forward = true, reverse = true;
    std::vector<int> seen(SLOTS, 0);
    for (int i = 0; i < SLOTS; i++) {
        int b = i / THREADS, j = i % THREADS;
        forward = forward && t[i] == i;
        reverse = reverse && t[i] == (BLOCKS - 1 - b) * THREADS + THREADS - 1 - j;
        if (t[i] < 0 || t[i] >= SLOTS || seen[t[i]]++) return false;
    }
    if (order == "forward") return forward;
    if (order == "reverse") return reverse;
    return !forward && !reverse;
}

int main() {
    const char *env = getenv("CUDAEMU_STREAMS");
    std::string order = env && *env ? env : "lazy";
    bool lazy = order == "lazy", random = order.rfind("random", 0) == 0;
    const char *memory = getenv("CUDAEMU_DEVICE_MEMORY");
    bool guarded = memory && !strcmp(memory, "guarded");
    enum { BYTES = 4096 };
    void *dev, *pinned;
    cudaStream_t s1, s2;
    cudaEvent_t e;
    CU(cudaMalloc(&dev, BYTES));
    CU(cudaMallocHost(&pinned, BYTES));
    CU(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CU(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CU(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    std::vector<unsigned char> pageable(BYTES);

    /* A copy on s2 after a wait for s1's work sees that work, whatever the order. */
    bool seen = true;
    for (int i = 0; i < 50; i++) {
        CU(cudaMemsetAsync(dev, i, BYTES, s1));
        CU(cudaEventRecord(e, s1));
        CU(cudaStreamWaitEvent(s2, e, 0));
        CU(cudaMemcpyAsync(pinned, dev, BYTES, cudaMemcpyDeviceToHost, s2));
        CU(cudaStreamSynchronize(s2));
        seen = seen && first_byte(pinned) == i;
    }
    check(seen, "a copy after a wait for an event did not see the work before the event");

    /* Without the wait: lazy leaves s1's work queued (the copy reads the old bytes), eager has
     * run it. */
    CU(cudaMemsetAsync(dev, 7, BYTES, s1));
    CU(cudaMemcpyAsync(pinned, dev, BYTES, cudaMemcpyDeviceToHost, s2));
    CU(cudaStreamSynchronize(s2));
    if (lazy) check(first_byte(pinned) == 49, "lazy: a copy on s2 saw s1's work it never waited for");
    if (order == "eager") check(first_byte(pinned) == 7, "eager: work did not run when issued");
    CU(cudaStreamSynchronize(s1));

    /* An event polled: lazy says not ready once, then ready; every order ends ready. */
    CU(cudaMemsetAsync(dev, 9, BYTES, s1));
    CU(cudaEventRecord(e, s1));
    cudaError_t first = cudaEventQuery(e);
    int polls = 1;
    while (cudaEventQuery(e) == cudaErrorNotReady && polls < 10) polls++;
    if (lazy) check(first == cudaErrorNotReady, "lazy: a queried event was ready before anything ran it");
    check(cudaEventQuery(e) == cudaSuccess, "a polled event never became ready");
    CU(cudaMemcpyAsync(pinned, dev, BYTES, cudaMemcpyDeviceToHost, s1));
    CU(cudaEventSynchronize(e));
    CU(cudaStreamSynchronize(s1));
    check(first_byte(pinned) == 9, "the work before a ready event had not run");

    /* Pageable memory: read by the call (a later write does not reach the device), written
     * by its return (no synchronisation needed). */
    memset(pageable.data(), 3, BYTES);
    CU(cudaMemcpyAsync(dev, pageable.data(), BYTES, cudaMemcpyHostToDevice, s1));
    memset(pageable.data(), 4, BYTES);
    CU(cudaMemcpyAsync(pageable.data(), dev, BYTES, cudaMemcpyDeviceToHost, s1));
    check(pageable[0] == 3 && pageable[BYTES - 1] == 3, "a copy from pageable memory read it after the call");

    /* Page-locked memory is read when the copy runs: lazily, after the host's next write. */
    memset(pinned, 5, BYTES);
    CU(cudaMemcpyAsync(dev, pinned, BYTES, cudaMemcpyHostToDevice, s1));
    memset(pinned, 6, BYTES);
    CU(cudaMemcpyAsync(pageable.data(), dev, BYTES, cudaMemcpyDeviceToHost, s1));
    if (lazy) check(pageable[0] == 6, "lazy: a copy from page-locked memory ran before it was needed");
    if (order == "eager")
        check(pageable[0] == 5, "eager: a copy from page-locked memory did not run at issue");

    /* Captured into a graph, a copy takes page-locked host memory only; the graph's copy then
     * reads it when the graph runs. */
    cudaGraph_t graph;
    CU(cudaStreamBeginCapture(s1, cudaStreamCaptureModeThreadLocal));
    int saved = quiet_stderr(); /* the two refusals' lines, expected here */
    cudaError_t into = cudaMemcpyAsync(pageable.data(), dev, BYTES, cudaMemcpyDeviceToHost, s1),
                from = cudaMemcpyAsync(dev, pageable.data(), BYTES, cudaMemcpyHostToDevice, s1);
    restore_stderr(saved);
    check(into != cudaSuccess, "a captured copy into pageable memory was accepted");
    check(from != cudaSuccess, "a captured copy from pageable memory was accepted");
    CU(cudaMemcpyAsync(dev, pinned, BYTES, cudaMemcpyHostToDevice, s1));
    CU(cudaStreamEndCapture(s1, &graph));
    cudaGraphExec_t exec;
    CU(cudaGraphInstantiate(&exec, graph, 0));
    memset(pinned, 11, BYTES);
    CU(cudaGraphLaunch(exec, s1));
    CU(cudaMemcpyAsync(pageable.data(), dev, BYTES, cudaMemcpyDeviceToHost, s1));
    check(pageable[0] == 11, "a graph's copy did not read page-locked memory as it ran");
    CU(cudaGraphExecDestroy(exec));
    CU(cudaGraphDestroy(graph));

    /* random: work on s1 issued before work on s2 sometimes runs after it (s2 synchronised
     * first), sometimes before; lazy: always after. */
    int s1_first = 0, s2_first = 0;
    for (int i = 0; i < 200; i++) {
        std::vector<int> ran;
        cudaemu::issue(s1, [&ran]() { ran.push_back(1); });
        cudaemu::issue(s2, [&ran]() { ran.push_back(2); });
        CU(cudaStreamSynchronize(s2));
        CU(cudaStreamSynchronize(s1));
        (ran.size() == 2 && ran[0] == 1 ? s1_first : s2_first)++;
    }
    if (random) check(s1_first > 0 && s2_first > 0, "random: two streams' work ran in one order only");
    if (lazy) check(s1_first == 0, "lazy: work ran before anything needed it");
    if (order == "eager") check(s2_first == 0, "eager: work did not run in issue order");

    /* A stream's work runs by its destruction; cudaFree waits for the device. */
    void *dev2;
    CU(cudaMalloc(&dev2, BYTES));
    CU(cudaMemsetAsync(dev, 8, BYTES, s2));
    CU(cudaMemcpyAsync(pinned, dev, BYTES, cudaMemcpyDeviceToHost, s2));
    CU(cudaStreamDestroy(s2));
    check(first_byte(pinned) == 8, "a destroyed stream's work never ran");
    CU(cudaMemsetAsync(dev2, 2, BYTES, s1));
    CU(cudaMemcpyAsync(pinned, dev2, BYTES, cudaMemcpyDeviceToHost, s1));
    CU(cudaFree(dev));
    check(first_byte(pinned) == 2, "cudaFree did not wait for the device");
    CU(cudaFree(dev2));

    /* Device memory is the device's: work reaches it; guarded, the host faults on it, and the
     * fault is named (never under ASan, whose exact heap blocks the host can reach). */
    CU(cudaMalloc(&dev, BYTES));
    cudaemu::issue(s1, [dev]() { ((unsigned char *)dev)[1] = 42; });
    CU(cudaMemcpyAsync(pageable.data(), dev, BYTES, cudaMemcpyDeviceToHost, s1));
    check(pageable[1] == 42, "work issued on a stream did not reach device memory");
#ifndef __SANITIZE_ADDRESS__
    if (guarded) check(host_touch_dies(dev), "guarded: the host read device memory without a fault named");
#endif
    CU(cudaFree(dev));

    /* CUDAEMU_THREADS: the order of a grid's blocks, and of a block's threads between barriers. */
    const char *threads_env = getenv("CUDAEMU_THREADS");
    std::string threads = threads_env && *threads_env ? threads_env : "forward";
    int *before, *after;
    CU(cudaMalloc((void **)&before, SLOTS * sizeof(int)));
    CU(cudaMalloc((void **)&after, SLOTS * sizeof(int)));
    cudaemu::operator*(turns_kernel, cudaemu::config(dim3(BLOCKS), dim3(THREADS), 0, s1)(before, after));
    std::vector<int> t1(SLOTS), t2(SLOTS);
    CU(cudaMemcpyAsync(t1.data(), before, SLOTS * sizeof(int), cudaMemcpyDeviceToHost, s1));
    CU(cudaMemcpyAsync(t2.data(), after, SLOTS * sizeof(int), cudaMemcpyDeviceToHost, s1));
    /* A block's threads all take their turn before the barrier, then all after it: block p of
     * the grid's order takes turns 2 p THREADS .. 2 p THREADS + THREADS - 1, then the next THREADS. */
    std::vector<int> ph1(SLOTS), ph2(SLOTS);
    bool barrier = true;
    for (int i = 0; i < SLOTS; i++) {
        int p1 = t1[i] / (2 * THREADS), r1 = t1[i] % (2 * THREADS);
        int p2 = t2[i] / (2 * THREADS), r2 = t2[i] % (2 * THREADS);
        barrier = barrier && p1 == p2 && r1 < THREADS && r2 >= THREADS;
        ph1[i] = p1 * THREADS + r1, ph2[i] = p2 * THREADS + r2 - THREADS;
    }
    check(barrier, "a thread went past __syncthreads before its block's others reached it");
    std::string kind = threads.rfind("shuffle", 0) == 0 ? "shuffle" : threads;
    check(turns_follow(ph1, kind),
          ("CUDAEMU_THREADS=" + threads + ": not its order before the barrier").c_str());
    check(turns_follow(ph2, kind),
          ("CUDAEMU_THREADS=" + threads + ": not its order after the barrier").c_str());
    check(ph1 != ph2 || kind != "shuffle",
          "CUDAEMU_THREADS=shuffle: the same order on both sides of a barrier");
    /* The race above: unseen in forward order, shown by the others. */
    for (int i = 0; i < SLOTS; i++) t1[i] = i;
    CU(cudaMemcpyAsync(before, t1.data(), SLOTS * sizeof(int), cudaMemcpyHostToDevice, s1));
    cudaemu::operator*(shift_kernel, cudaemu::config(dim3(BLOCKS), dim3(THREADS), 0, s1)(before, (int)SLOTS));
    CU(cudaMemcpyAsync(t2.data(), before, SLOTS * sizeof(int), cudaMemcpyDeviceToHost, s1));
    bool shifted = true;
    for (int i = 0; i + 1 < SLOTS; i++) shifted = shifted && t2[i] == i + 1;
    if (kind == "forward") check(shifted, "CUDAEMU_THREADS=forward: the in-place shift did not run in order");
    else check(!shifted, ("CUDAEMU_THREADS=" + threads + ": the in-place shift's race went unseen").c_str());
    CU(cudaFree(before));
    CU(cudaFree(after));

    CU(cudaEventDestroy(e));
    CU(cudaStreamDestroy(s1));
    CU(cudaFreeHost(pinned));
    printf("test_streams (%s%s, threads %s): %d passed, %d failed\n", order.c_str(),
           guarded ? ", guarded" : "", threads.c_str(), passed, failed);
    return failed != 0;
}
