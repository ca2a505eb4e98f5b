/* execl, execlp and execle for libixora_preload.so (see exec.rs): the
 * arguments collected as the C library collects them, then the shim's
 * execve / execvpe, which carry Ixora sockets across the exec. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>

extern char **environ;
int ixora_execve(const char *path, char *const argv[], char *const envp[]);
int ixora_execvpe(const char *file, char *const argv[], char *const envp[]);

/* How many arguments follow `arg` up to the NULL, `arg` counted; -1 (E2BIG)
 * past INT_MAX. */
#define COUNT(argc, arg)                                                                           \
    do {                                                                                           \
        va_list ap_;                                                                               \
        va_start(ap_, arg);                                                                        \
        for (argc = 1; va_arg(ap_, const char *); argc++) {                                        \
            if (argc == INT_MAX) {                                                                 \
                va_end(ap_);                                                                       \
                errno = E2BIG;                                                                     \
                return -1;                                                                         \
            }                                                                                      \
        }                                                                                          \
        va_end(ap_);                                                                               \
    } while (0)

/* argv[0..=argc] of a call whose fixed argument `arg` is followed by the
 * rest in `ap` (the NULL last); `ap` is left after the NULL. */
static void collect(char **argv, const char *arg, ptrdiff_t argc, va_list *ap) {
    argv[0] = (char *)arg;
    for (ptrdiff_t i = 1; i <= argc; i++)
        argv[i] = va_arg(*ap, char *);
}

/* One of the family: `name(file, arg, ..., NULL)` (then, `with_env`, the
 * environment) calls `call(file, argv, envp)`. */
#define EXECL(name, call, with_env)                                                                \
    int name(const char *file, const char *arg, ...) {                                             \
        ptrdiff_t argc;                                                                            \
        COUNT(argc, arg);                                                                          \
        char *argv[argc + 1];                                                                      \
        va_list ap;                                                                                \
        va_start(ap, arg);                                                                         \
        collect(argv, arg, argc, &ap);                                                             \
        char **envp = (with_env) ? va_arg(ap, char **) : environ;                                  \
        va_end(ap);                                                                                \
        return call(file, argv, envp);                                                             \
    }

EXECL(ixora_c_execl, ixora_execve, 0)
EXECL(ixora_c_execlp, ixora_execvpe, 0)
EXECL(ixora_c_execle, ixora_execve, 1)
