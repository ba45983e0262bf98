/* The instant SGLang stand-in of benchmarks/instant_sglang.py, in C (issue 33).
 *
 * Same wire, same answers byte for byte (tests/test_rollout_scale.py compares them), at a
 * fraction of the CPU per request. On a 2-core machine the Python stand-in's own CPU competed
 * with the driving processes it was there to measure: 2 drivers + 2 stand-ins on 2 cores
 * measured the stand-ins as much as the drivers. A measuring instrument, not a server: one
 * thread, epoll, keep-alive HTTP/1.1 with Content-Length bodies, canned answers.
 *
 *   cc -O2 -o instant_sglang benchmarks/instant_sglang.c
 *   ./instant_sglang --port 0 --stop-id 2 --tokens-per-turn 32 --answer-ids 7,8
 * prints "ready <port>" once it listens. instant_sglang.launch() builds and runs it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_N 65536

typedef struct {
    int fd;
    char *buf;
    size_t len, cap;
    long need; /* bytes of the current request (head + body) once its head is read; -1 before */
    char path[256];
    const char *out; /* unsent tail of an answer (points into a canned one) */
    size_t out_len;
} conn_t;

static int *ids, nids, stop_id; /* the answer of tokens-per-turn ids, as the Python one builds */
static char *answers[MAX_N + 1];
static size_t answer_len[MAX_N + 1];
static char *info, *health, *ok, *missing;
static size_t info_len, health_len, ok_len, missing_len;

static char *response(const char *status, const char *body, size_t *len) {
    size_t body_len = strlen(body);
    char head[256];
    int h = snprintf(head, sizeof head,
                     "HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %zu\r\n\r\n",
                     status, body_len);
    char *out = malloc(h + body_len);
    memcpy(out, head, h);
    memcpy(out + h, body, body_len);
    *len = h + body_len;
    return out;
}

/* json.dumps({"meta_info": ...}) of instant_sglang.py's Answers.generate for n tokens. */
static void build_answer(int n) {
    char *body = malloc(160 + (size_t)n * 32);
    size_t len = sprintf(body, "{\"meta_info\": {\"output_token_logprobs\": [");
    int last = -1;
    for (int i = 0; i < n; i++) {
        int id = ids[i % nids];
        if (i == n - 1 && n >= nids) id = stop_id;
        len += sprintf(body + len, "%s[-1.0, %d, null]", i ? ", " : "", id);
        last = id;
    }
    sprintf(body + len,
            "], \"finish_reason\": {\"type\": \"%s\"}, \"prompt_tokens\": 0, \"cached_tokens\": 0}}",
            (n > 0 && last == stop_id) ? "stop" : "length");
    answers[n] = response("200 OK", body, &answer_len[n]);
    free(body);
}

/* The last `"max_new_tokens":N` in [from, to): the body's own, after the history. */
static int max_new_tokens(const char *from, const char *to) {
    static const char key[] = "\"max_new_tokens\":";
    int n = -1;
    for (const char *p = from; p + sizeof key - 1 < to;) {
        const char *hit = memmem(p, to - p, key, sizeof key - 1);
        if (!hit) break;
        const char *q = hit + sizeof key - 1;
        if (q < to && isdigit((unsigned char)*q)) {
            long v = 0;
            while (q < to && isdigit((unsigned char)*q) && v <= MAX_N) v = v * 10 + (*q++ - '0');
            n = v > MAX_N ? MAX_N : (int)v;
        }
        p = hit + 1;
    }
    return n;
}

static void send_answer(int epfd, conn_t *c, const char *out, size_t len) {
    while (len > 0) {
        ssize_t w = send(c->fd, out, len, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                c->out = out, c->out_len = len;
                struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
                epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
            }
            return;
        }
        out += w, len -= w;
    }
    c->out = NULL, c->out_len = 0;
}

/* Answer every whole request in the buffer (like the Python Protocol's data_received loop). */
static void handle(int epfd, conn_t *c) {
    size_t start = 0;
    while (!c->out) {
        char *buf = c->buf + start;
        size_t len = c->len - start;
        if (c->need < 0) {
            char *end = memmem(buf, len, "\r\n\r\n", 4);
            if (!end) break;
            size_t head_len = end - buf;
            char *head = malloc(head_len + 1);
            for (size_t i = 0; i < head_len; i++) head[i] = tolower((unsigned char)buf[i]);
            head[head_len] = 0;
            char *sp = strchr(head, ' ');
            c->path[0] = 0;
            if (sp) {
                char *p = sp + 1, *e = p;
                while (*e && *e != ' ' && *e != '?') e++;
                size_t n = e - p < (long)sizeof c->path - 1 ? (size_t)(e - p) : sizeof c->path - 1;
                memcpy(c->path, p, n);
                c->path[n] = 0;
            }
            long length = 0;
            char *at = strstr(head, "\r\ncontent-length:");
            if (at) length = strtol(at + 17, NULL, 10);
            free(head);
            c->need = (long)head_len + 4 + length;
        }
        if ((long)len < c->need) break;
        const char *out;
        size_t out_len;
        if (strcmp(c->path, "/generate") == 0) {
            long from = c->need > 400 ? c->need - 400 : 0;
            int n = max_new_tokens(buf + from, buf + c->need);
            if (n < 0) n = nids;
            if (!answers[n]) build_answer(n);
            out = answers[n], out_len = answer_len[n];
        } else if (!strcmp(c->path, "/server_info") || !strcmp(c->path, "/model_info")) {
            out = info, out_len = info_len;
        } else if (!strcmp(c->path, "/health")) {
            out = health, out_len = health_len;
        } else if (!strcmp(c->path, "/abort_request")) {
            out = ok, out_len = ok_len;
        } else {
            out = missing, out_len = missing_len;
        }
        start += c->need;
        c->need = -1;
        send_answer(epfd, c, out, out_len);
    }
    if (start) {
        memmove(c->buf, c->buf + start, c->len - start);
        c->len -= start;
    }
}

static void drop(int epfd, conn_t *c) {
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->buf);
    free(c);
}

int main(int argc, char **argv) {
    int port = 0, tokens = 32;
    const char *pattern = "7";
    stop_id = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--port")) port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--tokens-per-turn")) tokens = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--stop-id")) stop_id = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--answer-ids")) pattern = argv[i + 1];
        else {
            fprintf(stderr, "unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (tokens < 1 || tokens > MAX_N) {
        fprintf(stderr, "--tokens-per-turn must be in 1..%d\n", MAX_N);
        return 2;
    }
    /* ids = (pattern * tokens)[: tokens - 1] + [stop], as instant_sglang.py's main builds. */
    int pat[4096], npat = 0;
    for (const char *p = pattern; *p && npat < 4096;) {
        pat[npat++] = (int)strtol(p, (char **)&p, 10);
        if (*p == ',') p++;
    }
    nids = tokens;
    ids = malloc(sizeof(int) * nids);
    for (int i = 0; i < nids - 1; i++) ids[i] = pat[i % npat];
    ids[nids - 1] = stop_id;

    info = response("200 OK", "{\"weight_version\": \"default\", \"model_path\": \"instant\"}", &info_len);
    health = response("200 OK", "{}", &health_len);
    ok = response("200 OK", "{\"success\": true}", &ok_len);
    missing = response("404 Not Found", "{\"error\":\"not found\"}", &missing_len);
    signal(SIGPIPE, SIG_IGN);

    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&addr, sizeof addr) || listen(ls, 4096)) {
        perror("bind/listen");
        return 1;
    }
    socklen_t alen = sizeof addr;
    getsockname(ls, (struct sockaddr *)&addr, &alen);
    printf("ready %d\n", ntohs(addr.sin_port));
    fflush(stdout);

    int epfd = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(epfd, EPOLL_CTL_ADD, ls, &ev);
    struct epoll_event events[256];
    for (;;) {
        int n = epoll_wait(epfd, events, 256, -1);
        if (n < 0 && errno == EINTR) continue;
        for (int i = 0; i < n; i++) {
            conn_t *c = events[i].data.ptr;
            if (!c) { /* the listening socket */
                int fd;
                while ((fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    conn_t *nc = calloc(1, sizeof *nc);
                    nc->fd = fd, nc->need = -1, nc->cap = 65536, nc->buf = malloc(nc->cap);
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = nc};
                    epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &cev);
                }
                continue;
            }
            if (events[i].events & EPOLLOUT && c->out) {
                const char *out = c->out;
                size_t len = c->out_len;
                c->out = NULL;
                struct epoll_event cev = {.events = EPOLLIN, .data.ptr = c};
                epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &cev);
                send_answer(epfd, c, out, len);
                if (!c->out) handle(epfd, c); /* requests that waited behind the answer */
                continue;
            }
            if (!(events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) continue;
            int closed = 0;
            for (;;) {
                if (c->cap - c->len < 65536) {
                    c->cap *= 2;
                    c->buf = realloc(c->buf, c->cap);
                }
                ssize_t r = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
                if (r > 0) {
                    c->len += r;
                    continue;
                }
                if (r == 0) closed = 1;
                else if (errno == EINTR) continue;
                else if (errno != EAGAIN && errno != EWOULDBLOCK) closed = 1;
                break;
            }
            handle(epfd, c);
            if (closed) drop(epfd, c);
        }
    }
}
