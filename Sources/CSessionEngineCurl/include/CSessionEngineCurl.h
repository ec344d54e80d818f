// Bounded HTTP transfers on the system's libcurl, loaded at run time.
//
// The package declares the few libcurl entry points it calls and loads `libcurl.so.4` with `dlopen`, so building
// needs no libcurl headers; on Linux the library is already in the process, since Foundation's networking links
// it. Nothing here buffers a response: every header line and every piece of body goes to the caller's callbacks,
// which can stop the transfer at once.

#ifndef CSESSIONENGINE_CURL_H
#define CSESSIONENGINE_CURL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/// What to send.
typedef struct se_curl_request {
    /// The absolute URL (`https`, or `http`).
    const char *_Nonnull url;
    /// The request method, an HTTP token.
    const char *_Nonnull method;
    /// Header lines, `Name: value`, checked by the caller for control characters.
    const char *_Nonnull const *_Nullable headers;
    /// How many header lines there are.
    size_t header_count;
    /// The request body, or NULL.
    const unsigned char *_Nullable body;
    /// The length of the body.
    size_t body_length;
    /// A backstop for the whole transfer, in milliseconds; the caller's own deadline normally ends it first.
    long timeout_ms;
    /// A PEM file of the certificate authorities to trust instead of the system's, or NULL.
    const char *_Nullable ca_file;
} se_curl_request;

/// Where the response goes. Every callback runs on the transfers' thread. `header`, `body` and `proceed` return
/// non-zero to go on and zero to stop the transfer at once; `done` is called exactly once, last.
typedef struct se_curl_callbacks {
    /// Passed to every callback.
    void *_Nullable context;
    /// One response header line as received, its CRLF included; the empty line ends a head.
    int (*_Nonnull header)(void *_Nullable context, const char *_Nonnull line, size_t length);
    /// The next piece of the response body, at most 16 KiB.
    int (*_Nonnull body)(void *_Nullable context, const unsigned char *_Nonnull bytes, size_t length);
    /// Called often while the transfer runs, and for every transfer after ``se_curl_wake``.
    int (*_Nonnull proceed)(void *_Nullable context);
    /// The transfer ended: 0 when the whole response was received, the `CURLcode` of the failure otherwise (23 or
    /// 42 when a callback stopped it), or one of the negative `SE_CURL_` codes.
    void (*_Nonnull done)(void *_Nullable context, int code);
} se_curl_callbacks;

/// The transfer could not start: libcurl is not available.
#define SE_CURL_UNAVAILABLE (-1)
/// The transfer could not start: libcurl refused an option or ran out of memory.
#define SE_CURL_SETUP_FAILED (-2)
/// The transfer was stopped because `proceed` said so after ``se_curl_wake``.
#define SE_CURL_STOPPED (-3)

/// Whether libcurl could be loaded (it is loaded on the first call).
int se_curl_is_available(void);

/// Starts a transfer on the process's one transfer thread, which drives every transfer through one libcurl multi
/// handle (so connections to a backend are reused) and is started on the first call.
///
/// Everything in `request` is copied before this returns. Redirects are never followed, only `http` and `https` are
/// spoken, certificates are verified, the body is never decoded (libcurl sends no `Accept-Encoding` and content
/// decoding is off), a proxy's connection headers are not reported, and no signal is used for timeouts.
///
/// - Returns: 0 when the transfer was handed to the thread; `done` then reports its end. A negative `SE_CURL_` code
///   when it could not start; `done` is not called then.
int se_curl_start(const se_curl_request *_Nonnull request, const se_curl_callbacks *_Nonnull callbacks);

/// Asks the transfer thread to call `proceed` for every running transfer, now, and to stop those that answer zero.
/// Call it when a transfer was decided elsewhere (a deadline, a cancellation), so that an idle one ends at once.
void se_curl_wake(void);

#ifdef __cplusplus
}
#endif

#endif
