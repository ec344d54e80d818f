#include "CSessionEngineRedis.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

// hiredis 0.14's context, as far as this file reads it: the error flags and text come first in every 0.14 release.
typedef struct redis_context_head {
    int err;
    char errstr[128];
} redis_context_head;

typedef void *(*connect_with_timeout_f)(const char *, int, const struct timeval);
typedef int (*set_timeout_f)(void *, const struct timeval);
typedef void *(*command_argv_f)(void *, int, const char **, const size_t *);
typedef void (*free_reply_f)(void *);
typedef void (*free_context_f)(void *);
typedef int (*enable_keep_alive_f)(void *);

static struct {
    connect_with_timeout_f connect_with_timeout;
    set_timeout_f set_timeout;
    command_argv_f command_argv;
    free_reply_f free_reply;
    free_context_f free_context;
    enable_keep_alive_f enable_keep_alive;
} api;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int loaded = 0;
static char load_error[160];

struct se_redis {
    void *context;
};

static void load(void) {
    void *library = dlopen("libhiredis.so.0.14", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        snprintf(load_error, sizeof load_error, "libhiredis.so.0.14 is not installed (Debian: libhiredis0.14)");
        return;
    }
#define LOAD(name, symbol) ((api.name = (__typeof__(api.name))dlsym(library, symbol)) != NULL)
    if (!(LOAD(connect_with_timeout, "redisConnectWithTimeout") && LOAD(set_timeout, "redisSetTimeout") &&
          LOAD(command_argv, "redisCommandArgv") && LOAD(free_reply, "freeReplyObject") &&
          LOAD(free_context, "redisFree") && LOAD(enable_keep_alive, "redisEnableKeepAlive"))) {
        snprintf(load_error, sizeof load_error, "libhiredis.so.0.14 lacks a function this package calls");
        dlclose(library);
        return;
    }
#undef LOAD
    loaded = 1;
}

int se_redis_load(char *why, size_t why_size) {
    pthread_once(&load_once, load);
    if (!loaded && why != NULL && why_size > 0) {
        snprintf(why, why_size, "%s", load_error);
    }
    return loaded;
}

static struct timeval milliseconds(int value) {
    struct timeval time = {.tv_sec = value / 1000, .tv_usec = (value % 1000) * 1000};
    return time;
}

static void copy_error(char *error, size_t error_size, const char *text) {
    if (error != NULL && error_size > 0) {
        snprintf(error, error_size, "%s", text);
    }
}

se_redis *se_redis_connect(const char *host, int port, int timeout_ms, int io_timeout_ms, char *error,
                           size_t error_size) {
    if (!se_redis_load(error, error_size)) {
        return NULL;
    }
    void *context = api.connect_with_timeout(host, port, milliseconds(timeout_ms));
    if (context == NULL) {
        copy_error(error, error_size, "out of memory");
        return NULL;
    }
    const redis_context_head *head = context;
    if (head->err != 0) {
        copy_error(error, error_size, head->errstr);
        api.free_context(context);
        return NULL;
    }
    if (api.set_timeout(context, milliseconds(io_timeout_ms)) != 0 || api.enable_keep_alive(context) != 0) {
        copy_error(error, error_size, head->err != 0 ? head->errstr : "could not set the connection's timeouts");
        api.free_context(context);
        return NULL;
    }
    se_redis *connection = malloc(sizeof *connection);
    if (connection == NULL) {
        api.free_context(context);
        copy_error(error, error_size, "out of memory");
        return NULL;
    }
    connection->context = context;
    return connection;
}

se_redis_reply *se_redis_command(se_redis *connection, int argc, const char **argv, const size_t *lengths,
                                 char *error, size_t error_size) {
    // hiredis 0.14 writes with write(2), which raises SIGPIPE on a connection the server reset, and SIGPIPE ends the
    // process unless the host ignores it. The thread blocks it around the command and takes back one it raised.
    sigset_t pipe_only, previous;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, &previous);
    sigset_t pending_before;
    sigpending(&pending_before);
    se_redis_reply *reply = api.command_argv(connection->context, argc, argv, lengths);
    sigset_t pending_after;
    sigpending(&pending_after);
    if (sigismember(&pending_after, SIGPIPE) && !sigismember(&pending_before, SIGPIPE)) {
        struct timespec now = {0, 0};
        sigtimedwait(&pipe_only, NULL, &now);
    }
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    if (reply == NULL) {
        const redis_context_head *head = connection->context;
        copy_error(error, error_size, head->err != 0 ? head->errstr : "no reply");
    }
    return reply;
}

void se_redis_free_reply(se_redis_reply *reply) {
    if (reply != NULL) {
        api.free_reply(reply);
    }
}

void se_redis_close(se_redis *connection) {
    if (connection != NULL) {
        api.free_context(connection->context);
        free(connection);
    }
}
