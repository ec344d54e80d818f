// The Redis protocol from the system's hiredis 0.14, loaded at run time: commands written and replies read, over
// a connection the caller keeps (CSessionEngineCurl's stream, plain or TLS).
//
// hiredis is loaded with dlopen, as CSessionEngineCurl loads libcurl: building needs no headers and linking needs no
// library, so the package builds where hiredis is missing and the coordinator reports it with a typed error when it
// is created. Only hiredis 0.14 (Debian bookworm's libhiredis0.14) is loaded: its reply and reader layouts are the
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

/// A reader of replies: bytes in, whole replies out.
typedef struct se_redis_reader se_redis_reader;

/// Loads hiredis once; 1 when it is there, 0 otherwise, with the reason in `why` (never longer than `why_size`).
int se_redis_load(char *why, size_t why_size);

/// Writes a command in the protocol into `*command`, which the caller frees with ``se_redis_free_command``.
///
/// - Returns: The command's length, or -1 (and `*command` NULL) when hiredis is missing or out of memory.
long se_redis_format(int argc, const char **argv, const size_t *lengths, char **command);

/// Frees what ``se_redis_format`` wrote.
void se_redis_free_command(char *command);

/// A new reader, or NULL when hiredis is missing or out of memory. Owned by one thread at a time.
se_redis_reader *se_redis_reader_create(void);

/// Hands the reader the next bytes received; 0 on success, -1 when the reader failed before.
int se_redis_reader_feed(se_redis_reader *reader, const unsigned char *bytes, size_t length);

/// Takes the next whole reply out of the reader: 0 with `*reply` set, 0 with `*reply` NULL when more bytes are
/// needed, -1 when the bytes are not the protocol (the reader is then unusable), with the reason in `error`.
int se_redis_reader_reply(se_redis_reader *reader, se_redis_reply **reply, char *error, size_t error_size);

/// Frees the reader and whatever it holds.
void se_redis_reader_free(se_redis_reader *reader);

/// Frees a reply and everything in it.
void se_redis_free_reply(se_redis_reply *reply);

#ifdef __cplusplus
}
#endif

#endif
