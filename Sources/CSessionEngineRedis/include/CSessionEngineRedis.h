// The Redis protocol and connection from the system's hiredis 0.14, loaded at run time.
//
// hiredis is loaded with dlopen, as CSessionEngineCurl loads libcurl: building needs no headers and linking needs no
// library, so the package builds where hiredis is missing and the coordinator reports it with a typed error when it
// is created. Only hiredis 0.14 (Debian bookworm's libhiredis0.14) is loaded: its reply and context layouts are the
// ones declared here, and 1.x changed the reply's.

#ifndef CSESSIONENGINE_REDIS_H
#define CSESSIONENGINE_REDIS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    SE_REDIS_REPLY_STRING = 1,
    SE_REDIS_REPLY_ARRAY = 2,
    SE_REDIS_REPLY_INTEGER = 3,
    SE_REDIS_REPLY_NIL = 4,
    SE_REDIS_REPLY_STATUS = 5,
    SE_REDIS_REPLY_ERROR = 6,
};

/// A reply, laid out as hiredis 0.14's `redisReply`.
typedef struct se_redis_reply {
    int type;
    long long integer;
    size_t len;
    char *str;
    size_t elements;
    struct se_redis_reply **element;
} se_redis_reply;

/// One connection to a server; owned by one thread at a time.
typedef struct se_redis se_redis;

/// Loads hiredis once; 1 when it is there, 0 otherwise, with the reason in `why` (never longer than `why_size`).
int se_redis_load(char *why, size_t why_size);

/// Connects to `host`:`port` within `timeout_ms` (the name's resolution is not bounded by it), and sets the timeout
/// of every later read and write on the connection to `io_timeout_ms`. NULL on failure, with the reason in `error`.
se_redis *se_redis_connect(const char *host, int port, int timeout_ms, int io_timeout_ms, char *error,
                           size_t error_size);

/// Sends one command and waits for its reply, each bounded by the connection's timeout. NULL when the connection
/// failed (it is then unusable), with the reason in `error`; an error reply of the server is a reply.
se_redis_reply *se_redis_command(se_redis *connection, int argc, const char **argv, const size_t *lengths,
                                 char *error, size_t error_size);

/// Frees a reply and everything in it.
void se_redis_free_reply(se_redis_reply *reply);

/// Closes the connection and frees it.
void se_redis_close(se_redis *connection);

#ifdef __cplusplus
}
#endif

#endif
