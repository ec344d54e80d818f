// Bounded HTTP transfers on libcurl's multi interface, with libcurl loaded at run time.
//
// One thread drives every transfer of the process through one multi handle: it adds the transfers that were
// started, lets libcurl move them along, reports the ones that ended and sleeps in `curl_multi_poll` until a socket
// is ready, a libcurl timer is due, or `se_curl_start` / `se_curl_wake` wakes it. The multi handle is touched by that
// thread only; the other threads hand it work through a mutex-protected list and `curl_multi_wakeup`.
//
// The option numbers and signatures are libcurl's stable ABI (curl.h, SONAME libcurl.so.4); they are declared here
// instead of included, so that no development package is needed. libcurl 7.77 or later is needed for trusting given
// authorities (CURLOPT_CAINFO_BLOB); everything else works from 7.68 (Debian 12 has 7.88).

#include "CSessionEngineCurl.h"

#if defined(__linux__)

#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void CURL;
typedef void CURLM;
struct curl_slist;

/// libcurl's `CURLMsg`: what `curl_multi_info_read` returns for a transfer that ended.
typedef struct {
    int msg;
    CURL *easy_handle;
    union {
        void *whatever;
        int result;
    } data;
} se_curl_message;

enum {
    SE_CURL_GLOBAL_ALL = 3,
    SE_CURLE_OK = 0,
    SE_CURLM_OK = 0,
    SE_CURLMSG_DONE = 1,
    // Multi options: CURLOPTTYPE_LONG + n.
    SE_CURLMOPT_MAXCONNECTS = 6,
    // Options: CURLOPTTYPE_LONG + n, CURLOPTTYPE_OBJECTPOINT (10000) + n, CURLOPTTYPE_FUNCTIONPOINT (20000) + n,
    // CURLOPTTYPE_OFF_T (30000) + n, CURLOPTTYPE_BLOB (40000) + n.
    SE_CURLOPT_WRITEDATA = 10001,
    SE_CURLOPT_URL = 10002,
    SE_CURLOPT_PROXY = 10004,
    SE_CURLOPT_HTTPHEADER = 10023,
    SE_CURLOPT_HEADERDATA = 10029,
    SE_CURLOPT_CUSTOMREQUEST = 10036,
    SE_CURLOPT_XFERINFODATA = 10057,
    SE_CURLOPT_CAINFO = 10065,
    SE_CURLOPT_CAPATH = 10097,
    SE_CURLOPT_PRIVATE = 10103,
    SE_CURLOPT_COPYPOSTFIELDS = 10165,
    SE_CURLOPT_NOPROXY = 10177,
    SE_CURLOPT_SSLCERT = 10025,
    SE_CURLOPT_SSLKEY = 10087,
    SE_CURLOPT_CAINFO_BLOB = 40309,
    SE_CURLOPT_WRITEFUNCTION = 20011,
    SE_CURLOPT_HEADERFUNCTION = 20079,
    SE_CURLOPT_XFERINFOFUNCTION = 20219,
    SE_CURLOPT_POSTFIELDSIZE_LARGE = 30120,
    SE_CURLOPT_NOPROGRESS = 43,
    SE_CURLOPT_FOLLOWLOCATION = 52,
    SE_CURLOPT_HTTPPROXYTUNNEL = 61,
    SE_CURLOPT_FRESH_CONNECT = 74,
    SE_CURLOPT_SSL_VERIFYPEER = 64,
    SE_CURLOPT_SSL_VERIFYHOST = 81,
    SE_CURLOPT_NOSIGNAL = 99,
    SE_CURLOPT_TIMEOUT_MS = 155,
    SE_CURLOPT_CONNECT_ONLY = 141,
    SE_CURLOPT_CONNECTTIMEOUT_MS = 156,
    SE_CURLOPT_TCP_KEEPALIVE = 213,
    SE_CURLOPT_SSL_ENABLE_ALPN = 226,
    SE_CURLE_AGAIN = 81,
    SE_CURLOPT_HTTP_CONTENT_DECODING = 158,
    SE_CURLOPT_PROTOCOLS = 181,
    SE_CURLOPT_SUPPRESS_CONNECT_HEADERS = 265,
    SE_CURLOPT_QUICK_EXIT = 322,  // libcurl 7.87 and later
    SE_CURLPROTO_HTTP = 1,
    SE_CURLPROTO_HTTPS = 2,
    SE_CURL_BLOB_COPY = 1,
    // CURLINFO_STRING (0x100000) + n, CURLINFO_LONG (0x200000) + n.
    SE_CURLINFO_PRIVATE = 0x100015,
    SE_CURLINFO_CAINFO = 0x10003D,  // libcurl 7.84 and later: the built-in CA bundle's path
    SE_CURLINFO_SSL_VERIFYRESULT = 0x20000D,
    SE_CURLINFO_HTTP_CONNECTCODE = 0x200016,
    SE_CURLINFO_PROXY_SSL_VERIFYRESULT = 0x20002F,  // libcurl 7.52 and later
    SE_CURLINFO_PROXY_ERROR = 0x20003B,  // libcurl 7.73 and later
    SE_CURLINFO_ACTIVESOCKET = 0x50002C,  // CURLINFO_SOCKET + 44, libcurl 7.45 and later
    // How many idle connections the driver's cache keeps.
    SE_CURL_IDLE_CONNECTIONS = 64,
    // libcurl's CURL_MAX_INPUT_LENGTH: the largest string or blob an option takes.
    SE_CURL_MAX_INPUT_LENGTH = 8000000,
};

/// libcurl's `struct curl_blob`.
typedef struct {
    void *data;
    size_t len;
    unsigned int flags;
} se_curl_blob;

/// Where the system's CA bundle is on the common distributions, for a libcurl too old to say where its own is.
static const char *const system_bundles[] = {
    "/etc/ssl/certs/ca-certificates.crt",                 // Debian, Ubuntu, Alpine, Arch
    "/etc/pki/tls/certs/ca-bundle.crt",                   // Fedora, RHEL
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",  // RHEL, CentOS
    "/etc/ssl/ca-bundle.pem",                             // openSUSE
    NULL,
};

typedef int (*curl_global_init_f)(long flags);
typedef CURL *(*curl_easy_init_f)(void);
typedef int (*curl_easy_setopt_f)(CURL *handle, int option, ...);
typedef int (*curl_easy_getinfo_f)(CURL *handle, int info, ...);
typedef void (*curl_easy_cleanup_f)(CURL *handle);
typedef int (*curl_easy_perform_f)(CURL *handle);
typedef int (*curl_easy_send_f)(CURL *handle, const void *buffer, size_t length, size_t *sent);
typedef int (*curl_easy_recv_f)(CURL *handle, void *buffer, size_t length, size_t *received);
typedef const char *(*curl_easy_strerror_f)(int code);
typedef struct curl_slist *(*curl_slist_append_f)(struct curl_slist *list, const char *line);
typedef void (*curl_slist_free_all_f)(struct curl_slist *list);
typedef CURLM *(*curl_multi_init_f)(void);
typedef int (*curl_multi_add_handle_f)(CURLM *multi, CURL *handle);
typedef int (*curl_multi_remove_handle_f)(CURLM *multi, CURL *handle);
typedef int (*curl_multi_perform_f)(CURLM *multi, int *running);
typedef se_curl_message *(*curl_multi_info_read_f)(CURLM *multi, int *left);
typedef int (*curl_multi_poll_f)(CURLM *multi, void *extra, unsigned count, int timeout_ms, int *ready);
typedef int (*curl_multi_wakeup_f)(CURLM *multi);
typedef int (*curl_multi_setopt_f)(CURLM *multi, int option, ...);
typedef void *(*d2i_X509_f)(void **certificate, const unsigned char **input, long length);
typedef void (*X509_free_f)(void *certificate);
typedef const char *(*X509_verify_cert_error_string_f)(long result);

static struct {
    int loaded;
    curl_easy_init_f easy_init;
    curl_easy_setopt_f easy_setopt;
    curl_easy_getinfo_f easy_getinfo;
    curl_easy_cleanup_f easy_cleanup;
    curl_easy_perform_f easy_perform;
    curl_easy_send_f easy_send;
    curl_easy_recv_f easy_recv;
    curl_easy_strerror_f easy_strerror;
    curl_slist_append_f slist_append;
    curl_slist_free_all_f slist_free_all;
    curl_multi_init_f multi_init;
    curl_multi_add_handle_f multi_add_handle;
    curl_multi_remove_handle_f multi_remove_handle;
    curl_multi_perform_f multi_perform;
    curl_multi_info_read_f multi_info_read;
    curl_multi_poll_f multi_poll;
    curl_multi_wakeup_f multi_wakeup;
    curl_multi_setopt_f multi_setopt;
} api;

/// OpenSSL's certificate decoder, when the libcurl in the process uses OpenSSL (it is loaded with it).
static struct {
    d2i_X509_f d2i_X509;
    X509_free_f X509_free;
    X509_verify_cert_error_string_f verify_error_text;
} crypto;

/// One transfer: its easy handle, the header list libcurl reads from (it does not copy it) and the caller's
/// callbacks. It is in exactly one of the driver's lists, pending or running, until it is reported done.
typedef struct transfer {
    CURL *handle;
    struct curl_slist *headers;
    se_curl_callbacks callbacks;
    struct transfer *next;
    struct transfer *previous;
} transfer;

static struct {
    pthread_mutex_t lock;
    CURLM *multi;
    transfer *pending;   // started, not yet added; guarded by `lock`
    int wake;            // `se_curl_wake` was called; guarded by `lock`
    transfer *running;   // added to the multi handle, linked both ways; the driver thread's own
} driver = {.lock = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t load_once = PTHREAD_ONCE_INIT;

#define LOAD(name, symbol) ((api.name = (__typeof__(api.name))dlsym(library, symbol)) != NULL)

static void *drive(void *unused);

static void load(void) {
    void *library = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        return;
    }
    curl_global_init_f global_init = (curl_global_init_f)dlsym(library, "curl_global_init");
    int complete = global_init != NULL && LOAD(easy_init, "curl_easy_init")
        && LOAD(easy_setopt, "curl_easy_setopt") && LOAD(easy_getinfo, "curl_easy_getinfo")
        && LOAD(easy_cleanup, "curl_easy_cleanup") && LOAD(easy_perform, "curl_easy_perform")
        && LOAD(easy_send, "curl_easy_send") && LOAD(easy_recv, "curl_easy_recv")
        && LOAD(easy_strerror, "curl_easy_strerror") && LOAD(slist_append, "curl_slist_append")
        && LOAD(slist_free_all, "curl_slist_free_all") && LOAD(multi_init, "curl_multi_init")
        && LOAD(multi_add_handle, "curl_multi_add_handle") && LOAD(multi_remove_handle, "curl_multi_remove_handle")
        && LOAD(multi_perform, "curl_multi_perform") && LOAD(multi_info_read, "curl_multi_info_read")
        && LOAD(multi_poll, "curl_multi_poll") && LOAD(multi_wakeup, "curl_multi_wakeup")
        && LOAD(multi_setopt, "curl_multi_setopt");
    // Reference-counted and thread-safe in every libcurl since 7.84; earlier ones need this before any thread
    // uses libcurl, which `pthread_once` gives within this package.
    if (!complete || global_init(SE_CURL_GLOBAL_ALL) != SE_CURLE_OK) {
        return;
    }
    // The libcrypto libcurl loaded, if it uses OpenSSL: the parser it will read the authorities with. It is not
    // loaded here when libcurl uses another TLS library.
    static const char *const cryptos[] = {"libcrypto.so.3", "libcrypto.so.1.1", NULL};
    for (size_t index = 0; cryptos[index] != NULL && crypto.X509_free == NULL; index++) {
        void *openssl = dlopen(cryptos[index], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
        if (openssl != NULL) {
            crypto.d2i_X509 = (d2i_X509_f)dlsym(openssl, "d2i_X509");
            crypto.X509_free = crypto.d2i_X509 != NULL ? (X509_free_f)dlsym(openssl, "X509_free") : NULL;
            crypto.verify_error_text = crypto.X509_free != NULL
                ? (X509_verify_cert_error_string_f)dlsym(openssl, "X509_verify_cert_error_string")
                : NULL;
        }
    }
    driver.multi = api.multi_init();
    if (driver.multi == NULL) {
        return;
    }
    // libcurl's default cache holds four connections per transfer running, counted each time one goes idle: in a
    // process whose fetchers speak to more hosts than that (backends, proxies) with one fetch running, the fifth
    // idle connection closed the oldest, another fetcher's, and its next fetch paid a new connection and handshake.
    // A fixed cache keeps them; an idle connection is still closed after libcurl's idle limit (118 s) or by the
    // server.
    api.multi_setopt(driver.multi, SE_CURLMOPT_MAXCONNECTS, (long)SE_CURL_IDLE_CONNECTIONS);
    pthread_attr_t attributes;
    pthread_attr_init(&attributes);
    pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
    pthread_t thread;
    int started = pthread_create(&thread, &attributes, drive, NULL) == 0;
    pthread_attr_destroy(&attributes);
    api.loaded = started;
}

int se_curl_is_available(void) {
    pthread_once(&load_once, load);
    return api.loaded;
}

static size_t on_header(char *line, size_t size, size_t count, void *user) {
    const se_curl_callbacks *callbacks = user;
    size_t length = size * count;
    return callbacks->header(callbacks->context, line, length) ? length : 0;
}

static size_t on_body(char *bytes, size_t size, size_t count, void *user) {
    const se_curl_callbacks *callbacks = user;
    size_t length = size * count;
    if (length == 0) {
        return 0;
    }
    return callbacks->body(callbacks->context, (const unsigned char *)bytes, length) ? length : 0;
}

static int on_progress(void *user, int64_t download_total, int64_t downloaded, int64_t upload_total,
                       int64_t uploaded) {
    (void)download_total;
    (void)downloaded;
    (void)upload_total;
    (void)uploaded;
    const se_curl_callbacks *callbacks = user;
    return callbacks->proceed(callbacks->context) ? 0 : 1;
}

/// Appends the file's bytes to `*buffer` (of `*length` bytes, grown with realloc); 0 when the file was read.
static int append_file(const char *path, unsigned char **buffer, size_t *length) {
    FILE *file = fopen(path, "rbe");
    if (file == NULL) {
        return 1;
    }
    unsigned char chunk[16384];
    size_t count;
    int failed = 0;
    while ((count = fread(chunk, 1, sizeof chunk, file)) > 0) {
        unsigned char *grown = realloc(*buffer, *length + count);
        if (grown == NULL) {
            failed = 1;
            break;
        }
        memcpy(grown + *length, chunk, count);
        *buffer = grown;
        *length += count;
    }
    failed |= ferror(file) != 0;
    fclose(file);
    return failed;
}

/// Trusts the given authorities: instead of the system's (no bundle, no directory), or beside them (the blob
/// already holds the system's bundle, read once when the trust was made, since a blob replaces libcurl's bundle file;
/// libcurl's directory is left as it is). libcurl copies the blob. 0 on success.
static int trust_authorities(CURL *handle, const unsigned char *pem, size_t length, int include_system) {
    if (length > SE_CURL_MAX_INPUT_LENGTH) {
        return 1;
    }
    se_curl_blob blob = {(void *)pem, length, SE_CURL_BLOB_COPY};
    int failed = api.easy_setopt(handle, SE_CURLOPT_CAINFO_BLOB, &blob);
    if (!include_system) {
        failed |= api.easy_setopt(handle, SE_CURLOPT_CAINFO, (char *)NULL);
        failed |= api.easy_setopt(handle, SE_CURLOPT_CAPATH, (char *)NULL);
    }
    return failed;
}

int se_curl_read_system_bundle(unsigned char **bytes, size_t *length) {
    *bytes = NULL;
    *length = 0;
    if (!se_curl_is_available()) {
        return 1;
    }
    int read = 1;
    CURL *handle = api.easy_init();
    if (handle != NULL) {
        char *bundle = NULL;
        if (api.easy_getinfo(handle, SE_CURLINFO_CAINFO, &bundle) == SE_CURLE_OK && bundle != NULL) {
            read = append_file(bundle, bytes, length);
        }
        api.easy_cleanup(handle);
    }
    for (size_t index = 0; read != 0 && system_bundles[index] != NULL; index++) {
        free(*bytes);
        *bytes = NULL;
        *length = 0;
        read = append_file(system_bundles[index], bytes, length);
    }
    if (read != 0) {
        free(*bytes);
        *bytes = NULL;
        *length = 0;
    }
    return read;
}

void se_curl_free(void *bytes) { free(bytes); }

int se_curl_check_certificate(const unsigned char *der, size_t length) {
    if (!se_curl_is_available() || crypto.d2i_X509 == NULL || length > 0x7FFFFFFF) {
        return -1;
    }
    const unsigned char *input = der;
    void *certificate = crypto.d2i_X509(NULL, &input, (long)length);
    if (certificate == NULL) {
        return 0;
    }
    crypto.X509_free(certificate);
    return input == der + length;
}

static void release(transfer *item) {
    if (item->handle != NULL) {
        api.easy_cleanup(item->handle);
    }
    api.slist_free_all(item->headers);
    free(item);
}

/// Creates the easy handle with every option; 0 on success.
static int configure(transfer *item, const se_curl_request *request) {
    for (size_t index = 0; index < request->header_count; index++) {
        struct curl_slist *appended = api.slist_append(item->headers, request->headers[index]);
        if (appended == NULL) {
            return 1;
        }
        item->headers = appended;
    }
    item->handle = api.easy_init();
    if (item->handle == NULL) {
        return 1;
    }
    CURL *handle = item->handle;
    void *callbacks = &item->callbacks;
    // String options are copied by libcurl; the header list is kept in `item` for the transfer's life.
    int failed = api.easy_setopt(handle, SE_CURLOPT_URL, request->url);
    failed |= api.easy_setopt(handle, SE_CURLOPT_CUSTOMREQUEST, request->method);
    failed |= api.easy_setopt(handle, SE_CURLOPT_HTTPHEADER, item->headers);
    if (request->body != NULL) {
        failed |= api.easy_setopt(handle, SE_CURLOPT_POSTFIELDSIZE_LARGE, (int64_t)request->body_length);
        failed |= api.easy_setopt(handle, SE_CURLOPT_COPYPOSTFIELDS, request->body);
    }
    failed |= api.easy_setopt(handle, SE_CURLOPT_PROTOCOLS, (long)(SE_CURLPROTO_HTTP | SE_CURLPROTO_HTTPS));
    failed |= api.easy_setopt(handle, SE_CURLOPT_FOLLOWLOCATION, 0L);
    failed |= api.easy_setopt(handle, SE_CURLOPT_HTTP_CONTENT_DECODING, 0L);
    failed |= api.easy_setopt(handle, SE_CURLOPT_SUPPRESS_CONNECT_HEADERS, 1L);
    failed |= api.easy_setopt(handle, SE_CURLOPT_SSL_VERIFYPEER, 1L);
    failed |= api.easy_setopt(handle, SE_CURLOPT_SSL_VERIFYHOST, 2L);
    if (request->ca_pem != NULL) {
        failed |= trust_authorities(handle, request->ca_pem, request->ca_pem_length, request->ca_include_system);
    }
    // An empty proxy turns every proxy off, the environment's included; a named one tunnels every request.
    if (request->proxy != NULL) {
        failed |= api.easy_setopt(handle, SE_CURLOPT_PROXY, request->proxy);
    }
    if (request->proxy != NULL && request->proxy[0] != '\0') {
        failed |= api.easy_setopt(handle, SE_CURLOPT_NOPROXY, "");
        failed |= api.easy_setopt(handle, SE_CURLOPT_HTTPPROXYTUNNEL, 1L);
    }
    if (request->fresh_connection) {
        failed |= api.easy_setopt(handle, SE_CURLOPT_FRESH_CONNECT, 1L);
    }
    failed |= api.easy_setopt(handle, SE_CURLOPT_NOSIGNAL, 1L);
    // A transfer stopped while its name is being resolved leaves the resolver's thread behind instead of waiting for
    // it: with the threaded resolver, libcurl otherwise joins that thread as the transfer is removed, on the one thread
    // that drives every transfer, and a name server that never answers would hold them all. An older libcurl does not
    // know the option; its result is ignored.
    (void)api.easy_setopt(handle, SE_CURLOPT_QUICK_EXIT, 1L);
    failed |= api.easy_setopt(handle, SE_CURLOPT_TIMEOUT_MS, request->timeout_ms);
    failed |= api.easy_setopt(handle, SE_CURLOPT_HEADERFUNCTION, on_header);
    failed |= api.easy_setopt(handle, SE_CURLOPT_HEADERDATA, callbacks);
    failed |= api.easy_setopt(handle, SE_CURLOPT_WRITEFUNCTION, on_body);
    failed |= api.easy_setopt(handle, SE_CURLOPT_WRITEDATA, callbacks);
    failed |= api.easy_setopt(handle, SE_CURLOPT_XFERINFOFUNCTION, on_progress);
    failed |= api.easy_setopt(handle, SE_CURLOPT_XFERINFODATA, callbacks);
    failed |= api.easy_setopt(handle, SE_CURLOPT_NOPROGRESS, 0L);
    failed |= api.easy_setopt(handle, SE_CURLOPT_PRIVATE, (void *)item);
    return failed;
}

int se_curl_start(const se_curl_request *request, const se_curl_callbacks *callbacks) {
    if (!se_curl_is_available()) {
        return SE_CURL_UNAVAILABLE;
    }
    transfer *item = calloc(1, sizeof(transfer));
    if (item == NULL) {
        return SE_CURL_SETUP_FAILED;
    }
    item->callbacks = *callbacks;
    if (configure(item, request) != 0) {
        release(item);
        return SE_CURL_SETUP_FAILED;
    }
    pthread_mutex_lock(&driver.lock);
    item->next = driver.pending;
    driver.pending = item;
    pthread_mutex_unlock(&driver.lock);
    api.multi_wakeup(driver.multi);
    return 0;
}

void se_curl_wake(void) {
    if (!se_curl_is_available()) {
        return;
    }
    pthread_mutex_lock(&driver.lock);
    driver.wake = 1;
    pthread_mutex_unlock(&driver.lock);
    api.multi_wakeup(driver.multi);
}

/// Takes the transfer out of the multi handle and the running list, reports it, and frees it.
static void finish(transfer *item, int code) {
    se_curl_outcome outcome = {.code = code};
    if (code > 0) {
        api.easy_getinfo(item->handle, SE_CURLINFO_SSL_VERIFYRESULT, &outcome.ssl_verify_result);
        api.easy_getinfo(item->handle, SE_CURLINFO_HTTP_CONNECTCODE, &outcome.connect_code);
        if (api.easy_getinfo(item->handle, SE_CURLINFO_PROXY_SSL_VERIFYRESULT, &outcome.proxy_ssl_verify_result)
            != SE_CURLE_OK) {
            outcome.proxy_ssl_verify_result = 0;
        }
        if (api.easy_getinfo(item->handle, SE_CURLINFO_PROXY_ERROR, &outcome.proxy_error) != SE_CURLE_OK) {
            outcome.proxy_error = 0;
        }
    }
    if (item->previous != NULL) {
        item->previous->next = item->next;
    } else {
        driver.running = item->next;
    }
    if (item->next != NULL) {
        item->next->previous = item->previous;
    }
    api.multi_remove_handle(driver.multi, item->handle);
    se_curl_callbacks callbacks = item->callbacks;
    release(item);
    callbacks.done(callbacks.context, &outcome);
}

static void *drive(void *unused) {
    (void)unused;
    for (;;) {
        pthread_mutex_lock(&driver.lock);
        transfer *started = driver.pending;
        driver.pending = NULL;
        int wake = driver.wake;
        driver.wake = 0;
        pthread_mutex_unlock(&driver.lock);

        // The list was built newest first: add the oldest first.
        transfer *ordered = NULL;
        while (started != NULL) {
            transfer *next = started->next;
            started->next = ordered;
            ordered = started;
            started = next;
        }
        while (ordered != NULL) {
            transfer *item = ordered;
            ordered = item->next;
            if (api.multi_add_handle(driver.multi, item->handle) != SE_CURLM_OK) {
                se_curl_callbacks callbacks = item->callbacks;
                release(item);
                se_curl_outcome outcome = {.code = SE_CURL_SETUP_FAILED};
                callbacks.done(callbacks.context, &outcome);
                continue;
            }
            item->previous = NULL;
            item->next = driver.running;
            if (driver.running != NULL) {
                driver.running->previous = item;
            }
            driver.running = item;
        }
        if (wake) {
            transfer *item = driver.running;
            while (item != NULL) {
                transfer *next = item->next;
                if (!item->callbacks.proceed(item->callbacks.context)) {
                    finish(item, SE_CURL_STOPPED);
                }
                item = next;
            }
        }

        int active = 0;
        api.multi_perform(driver.multi, &active);
        int left = 0;
        se_curl_message *message;
        while ((message = api.multi_info_read(driver.multi, &left)) != NULL) {
            if (message->msg != SE_CURLMSG_DONE) {
                continue;
            }
            transfer *item = NULL;
            api.easy_getinfo(message->easy_handle, SE_CURLINFO_PRIVATE, (char **)&item);
            if (item != NULL) {
                finish(item, message->data.result);
            }
        }
        // libcurl shortens the wait to its own next timer; with nothing running the thread sleeps until woken.
        api.multi_poll(driver.multi, NULL, 0, driver.running != NULL ? 1000 : 3600 * 1000, NULL);
    }
    return NULL;
}


// MARK: - Streams

struct se_curl_stream {
    CURL *handle;
    int socket;
};

static void stream_error(char *error, size_t error_size, const char *text) {
    if (error != NULL && error_size > 0) {
        snprintf(error, error_size, "%s", text);
    }
}

static int64_t monotonic_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/// SIGPIPE blocked on the calling thread, and whether one was pending before.
typedef struct {
    sigset_t previous;
    int was_pending;
} pipe_guard;

/// Blocks SIGPIPE on the thread: a TLS library may write to a socket the server reset without MSG_NOSIGNAL (in a
/// handshake, a read that renegotiates, a close_notify), which raises SIGPIPE, and SIGPIPE ends the process unless the
/// host ignores it.
static pipe_guard block_pipe(void) {
    pipe_guard guard;
    sigset_t pipe_only, pending;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, &guard.previous);
    sigpending(&pending);
    guard.was_pending = sigismember(&pending, SIGPIPE);
    return guard;
}

/// Takes back a SIGPIPE the calls since `block_pipe` raised, and restores the thread's mask.
static void unblock_pipe(pipe_guard guard) {
    sigset_t pipe_only, pending;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE) && !guard.was_pending) {
        struct timespec now = {0, 0};
        sigtimedwait(&pipe_only, NULL, &now);
    }
    pthread_sigmask(SIG_SETMASK, &guard.previous, NULL);
}

/// Waits until the socket is ready for `events` or `deadline_ms` passes; 1 when ready, 0 on timeout, -1 on error.
static int wait_for(int socket, short events, int64_t deadline_ms) {
    for (;;) {
        int64_t left = deadline_ms - monotonic_ms();
        if (left <= 0) {
            return 0;
        }
        struct pollfd descriptor = {.fd = socket, .events = events, .revents = 0};
        int ready = poll(&descriptor, 1, left > 60000 ? 60000 : (int)left);
        if (ready > 0) {
            return 1;
        }
        if (ready < 0 && errno != EINTR) {
            return -1;
        }
    }
}

se_curl_stream *se_curl_stream_open(const se_curl_stream_options *options, char *error, size_t error_size) {
    if (!se_curl_is_available()) {
        stream_error(error, error_size, "libcurl (libcurl.so.4) is not installed");
        return NULL;
    }
    CURL *handle = api.easy_init();
    if (handle == NULL) {
        stream_error(error, error_size, "out of memory");
        return NULL;
    }
    int failed = api.easy_setopt(handle, SE_CURLOPT_URL, options->url);
    failed |= api.easy_setopt(handle, SE_CURLOPT_CONNECT_ONLY, 1L);
    failed |= api.easy_setopt(handle, SE_CURLOPT_PROTOCOLS, (long)(SE_CURLPROTO_HTTP | SE_CURLPROTO_HTTPS));
    failed |= api.easy_setopt(handle, SE_CURLOPT_CONNECTTIMEOUT_MS, options->connect_timeout_ms);
    failed |= api.easy_setopt(handle, SE_CURLOPT_NOSIGNAL, 1L);
    failed |= api.easy_setopt(handle, SE_CURLOPT_TCP_KEEPALIVE, 1L);
    // The stream goes straight to its server, whatever the environment's proxy variables say.
    failed |= api.easy_setopt(handle, SE_CURLOPT_PROXY, "");
    failed |= api.easy_setopt(handle, SE_CURLOPT_SSL_VERIFYPEER, 1L);
    failed |= api.easy_setopt(handle, SE_CURLOPT_SSL_VERIFYHOST, 2L);
    // No application protocol is offered: the stream's bytes are the caller's, never HTTP/2.
    (void)api.easy_setopt(handle, SE_CURLOPT_SSL_ENABLE_ALPN, 0L);
    if (options->ca_pem != NULL) {
        failed |= trust_authorities(handle, options->ca_pem, options->ca_pem_length, options->ca_include_system);
    }
    if (options->certificate_file != NULL) {
        failed |= api.easy_setopt(handle, SE_CURLOPT_SSLCERT, options->certificate_file);
    }
    if (options->key_file != NULL) {
        failed |= api.easy_setopt(handle, SE_CURLOPT_SSLKEY, options->key_file);
    }
    (void)api.easy_setopt(handle, SE_CURLOPT_QUICK_EXIT, 1L);
    if (failed) {
        stream_error(error, error_size, "libcurl refused an option of the connection");
        api.easy_cleanup(handle);
        return NULL;
    }
    pipe_guard guard = block_pipe();
    int code = api.easy_perform(handle);
    unblock_pipe(guard);
    int socket = -1;  // curl_socket_t
    if (code == SE_CURLE_OK && api.easy_getinfo(handle, SE_CURLINFO_ACTIVESOCKET, &socket) != SE_CURLE_OK) {
        socket = -1;
    }
    if (code != SE_CURLE_OK || socket < 0) {
        long verify = 0;
        (void)api.easy_getinfo(handle, SE_CURLINFO_SSL_VERIFYRESULT, &verify);
        char text[200];
        if (code != SE_CURLE_OK && verify != 0 && crypto.verify_error_text != NULL) {
            snprintf(text, sizeof text, "%s (%s)", api.easy_strerror(code), crypto.verify_error_text(verify));
        } else if (code != SE_CURLE_OK && verify != 0) {
            snprintf(text, sizeof text, "%s (X509 verification error %ld)", api.easy_strerror(code), verify);
        } else {
            snprintf(text, sizeof text, "%s", code != SE_CURLE_OK ? api.easy_strerror(code) : "no socket");
        }
        stream_error(error, error_size, text);
        guard = block_pipe();
        api.easy_cleanup(handle);
        unblock_pipe(guard);
        return NULL;
    }
    se_curl_stream *stream = malloc(sizeof *stream);
    if (stream == NULL) {
        stream_error(error, error_size, "out of memory");
        api.easy_cleanup(handle);
        return NULL;
    }
    stream->handle = handle;
    stream->socket = socket;
    return stream;
}

int se_curl_stream_send(se_curl_stream *stream, const unsigned char *bytes, size_t length, long timeout_ms,
                        char *error, size_t error_size) {
    int64_t deadline = monotonic_ms() + timeout_ms;
    pipe_guard guard = block_pipe();
    int result = 0;
    while (length > 0) {
        size_t sent = 0;
        int code = api.easy_send(stream->handle, bytes, length, &sent);
        if (code == SE_CURLE_OK) {
            bytes += sent;
            length -= sent;
            continue;
        }
        int ready = code == SE_CURLE_AGAIN ? wait_for(stream->socket, POLLOUT, deadline) : -1;
        if (ready <= 0) {
            stream_error(error, error_size,
                         ready == 0 ? "the write did not finish within the timeout" : api.easy_strerror(code));
            result = ready == 0 ? SE_CURL_STREAM_TIMED_OUT : SE_CURL_STREAM_FAILED;
            break;
        }
    }
    unblock_pipe(guard);
    return result;
}

long se_curl_stream_receive(se_curl_stream *stream, unsigned char *buffer, size_t capacity, long timeout_ms,
                            char *error, size_t error_size) {
    int64_t deadline = monotonic_ms() + timeout_ms;
    pipe_guard guard = block_pipe();
    long result;
    for (;;) {
        size_t received = 0;
        int code = api.easy_recv(stream->handle, buffer, capacity, &received);
        if (code == SE_CURLE_OK) {
            if (received == 0) {
                stream_error(error, error_size, "the server closed the connection");
                result = SE_CURL_STREAM_FAILED;
            } else {
                result = (long)received;
            }
            break;
        }
        int ready = code == SE_CURLE_AGAIN ? wait_for(stream->socket, POLLIN, deadline) : -1;
        if (ready <= 0) {
            stream_error(error, error_size,
                         ready == 0 ? "no reply came within the timeout" : api.easy_strerror(code));
            result = ready == 0 ? SE_CURL_STREAM_TIMED_OUT : SE_CURL_STREAM_FAILED;
            break;
        }
    }
    unblock_pipe(guard);
    return result;
}

void se_curl_stream_close(se_curl_stream *stream) {
    if (stream != NULL) {
        pipe_guard guard = block_pipe();
        api.easy_cleanup(stream->handle);
        unblock_pipe(guard);
        free(stream);
    }
}

#else

int se_curl_is_available(void) { return 0; }

int se_curl_start(const se_curl_request *request, const se_curl_callbacks *callbacks) {
    (void)request;
    (void)callbacks;
    return SE_CURL_UNAVAILABLE;
}

void se_curl_wake(void) {}

int se_curl_read_system_bundle(unsigned char **bytes, size_t *length) {
    *bytes = NULL;
    *length = 0;
    return 1;
}

void se_curl_free(void *bytes) { (void)bytes; }

int se_curl_check_certificate(const unsigned char *der, size_t length) {
    (void)der;
    (void)length;
    return -1;
}

se_curl_stream *se_curl_stream_open(const se_curl_stream_options *options, char *error, size_t error_size) {
    (void)options;
    if (error != NULL && error_size > 0) {
        error[0] = '\0';
    }
    return NULL;
}

int se_curl_stream_send(se_curl_stream *stream, const unsigned char *bytes, size_t length, long timeout_ms,
                        char *error, size_t error_size) {
    (void)stream;
    (void)bytes;
    (void)length;
    (void)timeout_ms;
    (void)error;
    (void)error_size;
    return SE_CURL_STREAM_FAILED;
}

long se_curl_stream_receive(se_curl_stream *stream, unsigned char *buffer, size_t capacity, long timeout_ms,
                            char *error, size_t error_size) {
    (void)stream;
    (void)buffer;
    (void)capacity;
    (void)timeout_ms;
    (void)error;
    (void)error_size;
    return SE_CURL_STREAM_FAILED;
}

void se_curl_stream_close(se_curl_stream *stream) { (void)stream; }

#endif
