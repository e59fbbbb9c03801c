/* The libzmq side of the side-by-side comparison: the four perf tools of libzmq's perf/ directory
 * (same arguments, same output lines), written against the public libzmq C API. Built only by
 * bench/compare.sh, never part of the product. Usage: perf local_thr|remote_thr|local_lat|remote_lat ARGS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void die(const char *what) {
    fprintf(stderr, "%s: %s\n", what, zmq_strerror(zmq_errno()));
    exit(1);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: perf local_thr|remote_thr|local_lat|remote_lat <endpoint> <size> <count>\n");
        return 1;
    }
    const char *mode = argv[1], *ep = argv[2];
    size_t size = (size_t)atol(argv[3]);
    long count = atol(argv[4]);
    void *ctx = zmq_ctx_new();
    zmq_msg_t msg;
    if (!strcmp(mode, "local_thr")) {
        void *s = zmq_socket(ctx, ZMQ_PULL);
        if (zmq_bind(s, ep)) die("bind");
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, s, 0) < 0) die("recv");
        double start = now_us();
        for (long i = 1; i < count; i++)
            if (zmq_msg_recv(&msg, s, 0) < 0) die("recv");
        double elapsed = now_us() - start;
        if (elapsed < 1) elapsed = 1;
        double thr = count * 1e6 / elapsed;
        printf("message size: %zu [B]\nmessage count: %ld\nmean throughput: %lu [msg/s]\nmean throughput: %.3f [Mb/s]\n",
               size, count, (unsigned long)thr, thr * size * 8 / 1e6);
        zmq_close(s);
    } else if (!strcmp(mode, "remote_thr")) {
        void *s = zmq_socket(ctx, ZMQ_PUSH);
        if (zmq_connect(s, ep)) die("connect");
        for (long i = 0; i < count; i++) {
            zmq_msg_init_size(&msg, size);
            memset(zmq_msg_data(&msg), 0, size);
            if (zmq_msg_send(&msg, s, 0) < 0) die("send");
        }
        zmq_close(s);
    } else if (!strcmp(mode, "local_lat")) {
        void *s = zmq_socket(ctx, ZMQ_REP);
        if (zmq_bind(s, ep)) die("bind");
        zmq_msg_init(&msg);
        for (long i = 0; i < count; i++) {
            if (zmq_msg_recv(&msg, s, 0) < 0) die("recv");
            if (zmq_msg_send(&msg, s, 0) < 0) die("send");
        }
        zmq_close(s);
    } else if (!strcmp(mode, "remote_lat")) {
        void *s = zmq_socket(ctx, ZMQ_REQ);
        if (zmq_connect(s, ep)) die("connect");
        zmq_msg_init_size(&msg, size);
        memset(zmq_msg_data(&msg), 0, size);
        double start = now_us();
        for (long i = 0; i < count; i++) {
            if (zmq_msg_send(&msg, s, 0) < 0) die("send");
            if (zmq_msg_recv(&msg, s, 0) < 0) die("recv");
        }
        double elapsed = now_us() - start;
        printf("message size: %zu [B]\nroundtrip count: %ld\naverage latency: %.3f [us]\n", size, count, elapsed / (count * 2.0));
        zmq_close(s);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 1;
    }
    zmq_ctx_term(ctx);
    return 0;
}
