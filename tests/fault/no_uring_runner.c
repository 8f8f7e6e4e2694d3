/*
 * no_uring_runner: runs a command with io_uring blocked the way container runtimes block it.
 *
 *   no_uring_runner enosys|eperm COMMAND [ARG...]
 *
 * Installs a seccomp filter that makes io_uring_setup, io_uring_enter and io_uring_register
 * fail with ENOSYS (a kernel without io_uring, or a seccomp profile that hides it: Docker's
 * default) or EPERM (kernel.io_uring_disabled), then execs COMMAND, which inherits the filter.
 * Hand-written BPF, so there is no libseccomp dependency. Exit status 77 (skip) where seccomp
 * filters cannot be installed.
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#else
#error "add this architecture's AUDIT_ARCH_* value"
#endif

/* The same numbers on every architecture (the shared syscall table since Linux 5.1). */
enum { NR_IO_URING_SETUP = 425, NR_IO_URING_ENTER = 426, NR_IO_URING_REGISTER = 427 };

static int block_io_uring(int err) {
  struct sock_filter filter[] = {
      /* Another ABI (e.g. 32-bit on x86_64) numbers syscalls differently: leave it alone. */
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NR_IO_URING_SETUP, 3, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NR_IO_URING_ENTER, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NR_IO_URING_REGISTER, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (err & SECCOMP_RET_DATA)),
  };
  struct sock_fprog prog = {sizeof filter / sizeof filter[0], filter};
  /* Lets an unprivileged process install a filter; exec'd set-uid programs lose privilege. */
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

int main(int argc, char** argv) {
  if (argc < 3 || (strcmp(argv[1], "enosys") != 0 && strcmp(argv[1], "eperm") != 0)) {
    fprintf(stderr, "usage: %s enosys|eperm COMMAND [ARG...]\n", argv[0]);
    return 2;
  }
  int err = strcmp(argv[1], "enosys") == 0 ? ENOSYS : EPERM;
  if (block_io_uring(err) != 0) {
    fprintf(stderr, "no_uring_runner: cannot install a seccomp filter: %s (skip)\n",
            strerror(errno));
    return 77;
  }
  /* Check the filter does what it says before trusting any result. */
  char params[120] = {0}; /* struct io_uring_params */
  if (syscall(NR_IO_URING_SETUP, 1, params) != -1 || errno != err) {
    fprintf(stderr, "no_uring_runner: io_uring_setup was not blocked\n");
    return 1;
  }
  fprintf(stderr, "no_uring_runner: io_uring syscalls now fail with %s\n", argv[1]);
  execvp(argv[2], argv + 2);
  fprintf(stderr, "no_uring_runner: cannot run %s: %s\n", argv[2], strerror(errno));
  return 127;
}
