// The sanitizer runtime's defaults for both programs (linked into shardload and shardload-serve only;
// ASAN_OPTIONS and LSAN_OPTIONS still override them). A build without AddressSanitizer has nothing here.
// g++ says __SANITIZE_ADDRESS__; clang before 16 only __has_feature(address_sanitizer).
#if defined(__SANITIZE_ADDRESS__)
#define SHARDLOAD_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SHARDLOAD_ADDRESS_SANITIZER 1
#endif
#endif

#if defined(SHARDLOAD_ADDRESS_SANITIZER)
#include <sanitizer/asan_interface.h>

// intercept_tls_get_addr=0: the runtime of GCC up to 13 (and LLVM up to 16) takes a dynamic TLS block
// whose start falls 16 bytes into a page for one with a pre-2.25 glibc header and reads two words
// before it as an address and a length; LeakSanitizer's tracer then dies at exit ("Tracer caught
// signal 11", "LeakSanitizer has encountered a fatal error", exit 1) although nothing leaked. OpenMPI's
// plugins, loaded with dlopen, have such blocks, so a node under mpirun failed so now and then.
// Without the interceptor the leak check does not scan dynamic TLS: a block only such TLS points to
// would be reported, never missed.
extern "C" const char* __asan_default_options() { return "intercept_tls_get_addr=0"; }
#endif
