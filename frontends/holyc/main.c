/*
 * main.c - hcrun, minitorch's HolyC interpreter.
 *
 *   hcrun [--max-steps N] script.HC [args...]
 *
 * The script sees its arguments as ArgC / ArgV (ArgV[0] is the script path). The
 * interpreter runs on a thread with a large stack; a fault inside a script (a bad
 * pointer, say) is reported as file:line:col of the statement running and exit code 3
 * rather than a crash.
 */
#include "hc.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *script;

static void release_all(void) {
  fflush(stdout);
  hc_eval_release();
  hc_ffi_release();
  arena_release_all();
}

void hc_exit(int code) {
  release_all();
  exit(code);
}

static void put_str(const char *s) {
  size_t n = strlen(s);
  while (n) {
    ssize_t w = write(2, s, n);
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

static void put_num(long v) {
  char buf[32];
  int i = 31;
  buf[i] = 0;
  if (v < 0) v = 0;
  do {
    buf[--i] = (char)('0' + v % 10);
    v /= 10;
  } while (v && i > 0);
  put_str(buf + i);
}

static void on_fault(int sig) {
  Pos p = hc_cur_pos;
  put_str(hc_file_name(p.file));
  put_str(":");
  put_num(p.line);
  put_str(":");
  put_num(p.col);
  put_str(sig == SIGFPE ? ": runtime error: arithmetic fault\n"
                        : ": runtime error: invalid memory access (bad pointer or stack exhausted)\n");
  _exit(3);
}

static void install_fault_handlers(void) {
  static char *altstack;
  if (!altstack) altstack = malloc(1 << 16);
  if (altstack) {
    stack_t ss = {.ss_sp = altstack, .ss_size = 1 << 16, .ss_flags = 0};
    sigaltstack(&ss, NULL);
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_fault;
  sa.sa_flags = SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  sigaction(SIGFPE, &sa, NULL);
  sigaction(SIGILL, &sa, NULL);
}

static void *run_script(void *arg) {
  (void)arg;
  install_fault_handlers();
  TokenList toks = hc_preprocess(script);
  Program prog = hc_parse(toks);
  hc_run(&prog);
  release_all(); /* return (rather than exit) so the thread ends cleanly */
  return NULL;
}

static void usage(void) {
  fprintf(stderr, "usage: hcrun [--max-steps N] script.HC [args...]\n");
  exit(2);
}

int main(int argc, char **argv) {
  int i = 1;
  for (; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i++) {
    if (!strcmp(argv[i], "--")) {
      i++;
      break;
    }
    if (!strcmp(argv[i], "--max-steps") && i + 1 < argc) {
      char *end = NULL;
      const char *v = argv[++i];
      errno = 0;
      hc_max_steps = strtoll(v, &end, 10);
      if (!*v || *end || errno || hc_max_steps < 0) {
        fprintf(stderr, "hcrun: --max-steps wants a whole number >= 0 (0: no limit), got '%s'\n", v);
        return 2;
      }
    } else if (!strcmp(argv[i], "--help")) {
      usage();
    } else {
      fprintf(stderr, "hcrun: unknown option %s\n", argv[i]);
      usage();
    }
  }
  if (i >= argc) usage();
  script = argv[i];
  hc_argc = argc - i;
  hc_argv = argv + i;
  pthread_attr_t attr;
  pthread_t th;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, (size_t)512 << 20);
  if (pthread_create(&th, &attr, run_script, NULL) != 0) run_script(NULL);
  pthread_join(th, NULL);
  return 0;
}
