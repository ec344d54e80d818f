// A bounded HTTP transfer on libcurl's easy interface, with libcurl loaded at run time.
//
// The option numbers and signatures are libcurl's stable ABI (curl.h of libcurl 7.x and 8.x, SONAME
// libcurl.so.4); they are declared here instead of included, so that no development package is needed.

#include "CSessionEngineCurl.h"

#if defined(__linux__)

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

typedef void CURL;
struct curl_slist;

enum {
    SE_CURL_GLOBAL_ALL = 3,
    SE_CURLE_OK = 0,
    // Options: CURLOPTTYPE_LONG + n, CURLOPTTYPE_OBJECTPOINT (10000) + n, CURLOPTTYPE_FUNCTIONPOINT (20000) + n,
    // CURLOPTTYPE_OFF_T (30000) + n.
    SE_CURLOPT_WRITEDATA = 10001,
    SE_CURLOPT_URL = 10002,
    SE_CURLOPT_POSTFIELDS = 10015,
    SE_CURLOPT_HTTPHEADER = 10023,
    SE_CURLOPT_HEADERDATA = 10029,
    SE_CURLOPT_CUSTOMREQUEST = 10036,
    SE_CURLOPT_XFERINFODATA = 10057,
    SE_CURLOPT_CAINFO = 10065,
    SE_CURLOPT_WRITEFUNCTION = 20011,
    SE_CURLOPT_HEADERFUNCTION = 20079,
    SE_CURLOPT_XFERINFOFUNCTION = 20219,
    SE_CURLOPT_POSTFIELDSIZE_LARGE = 30120,
    SE_CURLOPT_NOPROGRESS = 43,
    SE_CURLOPT_FOLLOWLOCATION = 52,
    SE_CURLOPT_SSL_VERIFYPEER = 64,
    SE_CURLOPT_SSL_VERIFYHOST = 81,
    SE_CURLOPT_NOSIGNAL = 99,
    SE_CURLOPT_TIMEOUT_MS = 155,
    SE_CURLOPT_HTTP_CONTENT_DECODING = 158,
    SE_CURLOPT_PROTOCOLS = 181,
    SE_CURLOPT_SUPPRESS_CONNECT_HEADERS = 265,
    SE_CURLPROTO_HTTP = 1,
    SE_CURLPROTO_HTTPS = 2,
};

typedef int (*curl_global_init_f)(long flags);
typedef CURL *(*curl_easy_init_f)(void);
typedef int (*curl_easy_setopt_f)(CURL *handle, int option, ...);
typedef int (*curl_easy_perform_f)(CURL *handle);
typedef void (*curl_easy_cleanup_f)(CURL *handle);
typedef struct curl_slist *(*curl_slist_append_f)(struct curl_slist *list, const char *line);
typedef void (*curl_slist_free_all_f)(struct curl_slist *list);

static struct {
    int loaded;
    curl_easy_init_f easy_init;
    curl_easy_setopt_f easy_setopt;
    curl_easy_perform_f easy_perform;
    curl_easy_cleanup_f easy_cleanup;
    curl_slist_append_f slist_append;
    curl_slist_free_all_f slist_free_all;
} api;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load(void) {
    void *library = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        return;
    }
    curl_global_init_f global_init = (curl_global_init_f)dlsym(library, "curl_global_init");
    api.easy_init = (curl_easy_init_f)dlsym(library, "curl_easy_init");
    api.easy_setopt = (curl_easy_setopt_f)dlsym(library, "curl_easy_setopt");
    api.easy_perform = (curl_easy_perform_f)dlsym(library, "curl_easy_perform");
    api.easy_cleanup = (curl_easy_cleanup_f)dlsym(library, "curl_easy_cleanup");
    api.slist_append = (curl_slist_append_f)dlsym(library, "curl_slist_append");
    api.slist_free_all = (curl_slist_free_all_f)dlsym(library, "curl_slist_free_all");
    if (global_init == NULL || api.easy_init == NULL || api.easy_setopt == NULL || api.easy_perform == NULL
        || api.easy_cleanup == NULL || api.slist_append == NULL || api.slist_free_all == NULL) {
        return;
    }
    // Reference-counted and thread-safe in every libcurl since 7.84; earlier ones need this before any thread
    // uses libcurl, which `pthread_once` gives within this package.
    if (global_init(SE_CURL_GLOBAL_ALL) != SE_CURLE_OK) {
        return;
    }
    api.loaded = 1;
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

int se_curl_perform(const se_curl_request *request, const se_curl_callbacks *callbacks) {
    if (!se_curl_is_available()) {
        return SE_CURL_UNAVAILABLE;
    }
    CURL *handle = api.easy_init();
    if (handle == NULL) {
        return SE_CURL_SETUP_FAILED;
    }
    struct curl_slist *headers = NULL;
    int failed = 0;
    for (size_t index = 0; index < request->header_count; index++) {
        struct curl_slist *appended = api.slist_append(headers, request->headers[index]);
        if (appended == NULL) {
            failed = 1;
            break;
        }
        headers = appended;
    }
    if (!failed) {
        failed |= api.easy_setopt(handle, SE_CURLOPT_URL, request->url);
        failed |= api.easy_setopt(handle, SE_CURLOPT_CUSTOMREQUEST, request->method);
        failed |= api.easy_setopt(handle, SE_CURLOPT_HTTPHEADER, headers);
        if (request->body != NULL) {
            failed |= api.easy_setopt(handle, SE_CURLOPT_POSTFIELDSIZE_LARGE, (int64_t)request->body_length);
            failed |= api.easy_setopt(handle, SE_CURLOPT_POSTFIELDS, request->body);
        }
        failed |= api.easy_setopt(handle, SE_CURLOPT_PROTOCOLS, (long)(SE_CURLPROTO_HTTP | SE_CURLPROTO_HTTPS));
        failed |= api.easy_setopt(handle, SE_CURLOPT_FOLLOWLOCATION, 0L);
        failed |= api.easy_setopt(handle, SE_CURLOPT_HTTP_CONTENT_DECODING, 0L);
        failed |= api.easy_setopt(handle, SE_CURLOPT_SUPPRESS_CONNECT_HEADERS, 1L);
        failed |= api.easy_setopt(handle, SE_CURLOPT_SSL_VERIFYPEER, 1L);
        failed |= api.easy_setopt(handle, SE_CURLOPT_SSL_VERIFYHOST, 2L);
        if (request->ca_file != NULL) {
            failed |= api.easy_setopt(handle, SE_CURLOPT_CAINFO, request->ca_file);
        }
        failed |= api.easy_setopt(handle, SE_CURLOPT_NOSIGNAL, 1L);
        failed |= api.easy_setopt(handle, SE_CURLOPT_TIMEOUT_MS, request->timeout_ms);
        failed |= api.easy_setopt(handle, SE_CURLOPT_HEADERFUNCTION, on_header);
        failed |= api.easy_setopt(handle, SE_CURLOPT_HEADERDATA, (void *)callbacks);
        failed |= api.easy_setopt(handle, SE_CURLOPT_WRITEFUNCTION, on_body);
        failed |= api.easy_setopt(handle, SE_CURLOPT_WRITEDATA, (void *)callbacks);
        failed |= api.easy_setopt(handle, SE_CURLOPT_XFERINFOFUNCTION, on_progress);
        failed |= api.easy_setopt(handle, SE_CURLOPT_XFERINFODATA, (void *)callbacks);
        failed |= api.easy_setopt(handle, SE_CURLOPT_NOPROGRESS, 0L);
    }
    int result = failed ? SE_CURL_SETUP_FAILED : api.easy_perform(handle);
    api.easy_cleanup(handle);
    api.slist_free_all(headers);
    return result;
}

#else

int se_curl_is_available(void) { return 0; }

int se_curl_perform(const se_curl_request *request, const se_curl_callbacks *callbacks) {
    (void)request;
    (void)callbacks;
    return SE_CURL_UNAVAILABLE;
}

#endif
