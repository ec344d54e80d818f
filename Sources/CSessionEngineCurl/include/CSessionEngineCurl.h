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
    /// PEM text of the certificate authorities to trust, or NULL for the system's (libcurl's built-in bundle and
    /// directory). With `ca_include_system` it must hold the system's bundle too (``se_curl_read_system_bundle``):
    /// it replaces libcurl's bundle file. It is copied before ``se_curl_start`` returns.
    const unsigned char *_Nullable ca_pem;
    /// The length of `ca_pem`, at most 8,000,000 (libcurl's `CURL_MAX_INPUT_LENGTH`); a longer one fails
    /// the setup.
    size_t ca_pem_length;
    /// With `ca_pem`: non-zero to keep libcurl's directory of authorities as well, zero to trust only `ca_pem`.
    int ca_include_system;
    /// The proxy to tunnel the request through, a URL as libcurl's `CURLOPT_PROXY` takes it; the empty string for
    /// none, whatever the environment says; NULL to let libcurl read the environment's proxy variables itself.
    const char *_Nullable proxy;
    /// Non-zero to open a new connection for this transfer instead of reusing one (a retry after a failure, which
    /// the connection may have caused).
    int fresh_connection;
} se_curl_request;

/// How a transfer ended.
typedef struct se_curl_outcome {
    /// 0 when the whole response was received, the `CURLcode` of the failure otherwise (23 or 42 when a callback
    /// stopped it), or one of the negative `SE_CURL_` codes.
    int code;
    /// The certificate verification's result (OpenSSL's `X509_V_ERR_` code, `CURLINFO_SSL_VERIFYRESULT`); 0 when it
    /// passed or did not run.
    long ssl_verify_result;
    /// The proxy's answer to `CONNECT` (`CURLINFO_HTTP_CONNECTCODE`), 0 when there was none.
    long connect_code;
    /// libcurl's detail of a proxy failure (`CURLINFO_PROXY_ERROR`, a `CURLproxycode`), 0 when there was none.
    long proxy_error;
    /// The verification result of an `https` proxy's certificate (`CURLINFO_PROXY_SSL_VERIFYRESULT`); 0 when it
    /// passed or did not run.
    long proxy_ssl_verify_result;
} se_curl_outcome;

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
    /// The transfer ended, as `outcome` says (valid only during the call).
    void (*_Nonnull done)(void *_Nullable context, const se_curl_outcome *_Nonnull outcome);
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
/// decoding is off), a proxy named in `request` tunnels every request with `CONNECT` (`http` included), a proxy's
/// connection headers are not reported, and no signal is used for timeouts.
///
/// - Returns: 0 when the transfer was handed to the thread; `done` then reports its end. A negative `SE_CURL_` code
///   when it could not start; `done` is not called then.
int se_curl_start(const se_curl_request *_Nonnull request, const se_curl_callbacks *_Nonnull callbacks);

/// Asks the transfer thread to call `proceed` for every running transfer, now, and to stop those that answer zero.
/// Call it when a transfer was decided elsewhere (a deadline, a cancellation), so that an idle one ends at once.
void se_curl_wake(void);

/// Reads the system's CA bundle, the file libcurl was built to read (or the first of the common distributions'
/// bundles when libcurl is too old to say), into `*bytes`, which the caller frees with ``se_curl_free``.
///
/// - Returns: 0 when it was read; non-zero, with `*bytes` NULL and `*length` 0, when there is none to read.
int se_curl_read_system_bundle(unsigned char *_Nullable *_Nonnull bytes, size_t *_Nonnull length);

/// Frees what ``se_curl_read_system_bundle`` allocated.
void se_curl_free(void *_Nullable bytes);

/// Decodes a DER certificate with the parser libcurl reads authorities with, OpenSSL's `d2i_X509`, when the libcurl
/// in the process uses OpenSSL.
///
/// - Returns: 1 when it decodes and fills `length` exactly, 0 when it does not, -1 when there is no such parser to
///   ask (libcurl is not there, or uses another TLS library).
int se_curl_check_certificate(const unsigned char *_Nonnull der, size_t length);

/// Where a stream goes and how it proves the server.
typedef struct se_curl_stream_options {
    /// `http://host:port` for a plain TCP connection, `https://host:port` for TLS; nothing is spoken but the bytes
    /// the caller sends.
    const char *_Nonnull url;
    /// How long the name's resolution, the connection and the TLS handshake may take together.
    long connect_timeout_ms;
    /// PEM text of the certificate authorities to trust, or NULL for the system's, as in ``se_curl_request``.
    const unsigned char *_Nullable ca_pem;
    /// The length of `ca_pem`, at most 8,000,000.
    size_t ca_pem_length;
    /// With `ca_pem`: non-zero to keep libcurl's directory of authorities as well.
    int ca_include_system;
    /// The PEM file of the client's certificate (mutual TLS), or NULL to present none.
    const char *_Nullable certificate_file;
    /// The PEM file of the client certificate's private key, or NULL when it is in `certificate_file`.
    const char *_Nullable key_file;
} se_curl_stream_options;

/// A connection of bytes to a server, plain or TLS, owned by one thread at a time.
typedef struct se_curl_stream se_curl_stream;

/// The stream's operation did not finish within its timeout; the stream is then unusable.
#define SE_CURL_STREAM_TIMED_OUT (-1)
/// The stream broke; it is unusable.
#define SE_CURL_STREAM_FAILED (-2)

/// Opens a stream with libcurl's connect-only mode: the name resolved, the connection made and, for `https`, the
/// TLS handshake done with the certificate and the host name verified, all within `connect_timeout_ms`. No proxy is
/// used, whatever the environment says, and no signal.
///
/// - Returns: The stream, or NULL with the reason in `error` (never longer than `error_size`).
se_curl_stream *_Nullable se_curl_stream_open(const se_curl_stream_options *_Nonnull options,
                                              char *_Nullable error, size_t error_size);

/// Sends every byte within `timeout_ms`.
///
/// - Returns: 0 when every byte went, or a negative `SE_CURL_STREAM_` code with the reason in `error`.
int se_curl_stream_send(se_curl_stream *_Nonnull stream, const unsigned char *_Nonnull bytes, size_t length,
                        long timeout_ms, char *_Nullable error, size_t error_size);

/// Receives what has come, at most `capacity` bytes, waiting at most `timeout_ms` for the first.
///
/// - Returns: How many bytes were received (at least one), or a negative `SE_CURL_STREAM_` code with the reason in
///   `error` (a server that closed the connection is a failure).
long se_curl_stream_receive(se_curl_stream *_Nonnull stream, unsigned char *_Nonnull buffer, size_t capacity,
                            long timeout_ms, char *_Nullable error, size_t error_size);

/// Closes the stream and frees it.
void se_curl_stream_close(se_curl_stream *_Nullable stream);

#ifdef __cplusplus
}
#endif

#endif
