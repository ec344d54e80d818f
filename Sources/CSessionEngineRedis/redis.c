#include "CSessionEngineRedis.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

// hiredis 0.14's reader, as far as this file reads it: the error flag and text come first in every 0.14 release.
typedef struct redis_reader_head {
    int err;
    char errstr[128];
} redis_reader_head;

typedef int (*format_command_argv_f)(char **, int, const char **, const size_t *);
typedef void (*free_command_f)(char *);
typedef void *(*reader_create_f)(void);
typedef int (*reader_feed_f)(void *, const char *, size_t);
typedef int (*reader_get_reply_f)(void *, void **);
typedef void (*reader_free_f)(void *);
typedef void (*free_reply_f)(void *);

static struct {
    format_command_argv_f format_command_argv;
    free_command_f free_command;
    reader_create_f reader_create;
    reader_feed_f reader_feed;
    reader_get_reply_f reader_get_reply;
    reader_free_f reader_free;
    free_reply_f free_reply;
} api;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int loaded = 0;
static char load_error[160];

static void load(void) {
    void *library = dlopen("libhiredis.so.0.14", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        snprintf(load_error, sizeof load_error, "libhiredis.so.0.14 is not installed (Debian: libhiredis0.14)");
        return;
    }
#define LOAD(name, symbol) ((api.name = (__typeof__(api.name))dlsym(library, symbol)) != NULL)
    if (!(LOAD(format_command_argv, "redisFormatCommandArgv") && LOAD(free_command, "redisFreeCommand") &&
          LOAD(reader_create, "redisReaderCreate") && LOAD(reader_feed, "redisReaderFeed") &&
          LOAD(reader_get_reply, "redisReaderGetReply") && LOAD(reader_free, "redisReaderFree") &&
          LOAD(free_reply, "freeReplyObject"))) {
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

long se_redis_format(int argc, const char **argv, const size_t *lengths, char **command) {
    *command = NULL;
    if (!se_redis_load(NULL, 0)) {
        return -1;
    }
    int length = api.format_command_argv(command, argc, argv, lengths);
    if (length < 0) {
        *command = NULL;
    }
    return length;
}

void se_redis_free_command(char *command) {
    if (command != NULL) {
        api.free_command(command);
    }
}

se_redis_reader *se_redis_reader_create(void) {
    if (!se_redis_load(NULL, 0)) {
        return NULL;
    }
    return api.reader_create();
}

int se_redis_reader_feed(se_redis_reader *reader, const unsigned char *bytes, size_t length) {
    return api.reader_feed(reader, (const char *)bytes, length) == 0 ? 0 : -1;
}

int se_redis_reader_reply(se_redis_reader *reader, se_redis_reply **reply, char *error, size_t error_size) {
    *reply = NULL;
    void *object = NULL;
    if (api.reader_get_reply(reader, &object) != 0) {
        const redis_reader_head *head = (const redis_reader_head *)reader;
        if (error != NULL && error_size > 0) {
            snprintf(error, error_size, "%s", head->err != 0 ? head->errstr : "the reply could not be read");
        }
        return -1;
    }
    *reply = object;
    return 0;
}

void se_redis_reader_free(se_redis_reader *reader) {
    if (reader != NULL) {
        api.reader_free(reader);
    }
}

void se_redis_free_reply(se_redis_reply *reply) {
    if (reply != NULL) {
        api.free_reply(reply);
    }
}
