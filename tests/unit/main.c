/* main.c — the unit-test registry: every suite of tests.h, run with CUnit's
 * basic interface; the exit status is the number of failures. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include "tests.h"

CU_pSuite tests_suite(const char *name) {
  CU_pSuite s = CU_add_suite(name, NULL, NULL);
  if (!s) {
    fprintf(stderr, "unit_tests: cannot add suite %s: %s\n", name, CU_get_error_msg());
    exit(99);
  }
  return s;
}

void tests_add(CU_pSuite s, const char *name, CU_TestFunc fn) {
  if (!CU_add_test(s, name, fn)) {
    fprintf(stderr, "unit_tests: cannot add test %s: %s\n", name, CU_get_error_msg());
    exit(99);
  }
}

char *tests_first_lines(const char *diags) {
  char *out = calloc(1, strlen(diags) + 1), *q = out;
  for (const char *p = diags; *p;) {
    const char *nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p + 1) : strlen(p);
    if (strncmp(p, "    ", 4) != 0 && strncmp(p, "      |", 7) != 0) {
      memcpy(q, p, n);
      q += n;
    }
    p += n;
  }
  return out;
}

/* A scratch directory for files, made on first use, removed at exit. */
static char tmpdir[64];

static void remove_tmpdir(void) {
  DIR *d = opendir(tmpdir);
  struct dirent *e;
  char path[384];
  while (d && (e = readdir(d)) != NULL) {
    snprintf(path, sizeof path, "%s/%s", tmpdir, e->d_name);
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
      unlink(path);
  }
  if (d)
    closedir(d);
  rmdir(tmpdir);
}

const char *tests_tmp_path(const char *name) {
  static char buf[4][128];
  static int next;
  if (!tmpdir[0]) {
    strcpy(tmpdir, "/tmp/gslrt_test_XXXXXX");
    if (!mkdtemp(tmpdir))
      CU_FAIL_FATAL("mkdtemp failed");
    atexit(remove_tmpdir);
  }
  char *p = buf[next++ % 4];
  snprintf(p, sizeof buf[0], "%s/%s", tmpdir, name);
  return p;
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS)
    return 99;
  add_lexer_tests();
  add_parser_tests();
  add_sema_tests();
  add_inline_tests();
  add_ir_tests();
  add_sharding_tests();
  add_rule_tests();
  add_plan_tests();
  add_codegen_tests();
  add_runtime_tests();
  add_bf16_tests();
  CU_basic_set_mode(CU_BRM_VERBOSE);
  CU_basic_run_tests();
  unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
  unsigned run = CU_get_number_of_tests_run();
  CU_cleanup_registry();
  if (run == 0) {
    fprintf(stderr, "unit_tests: no test ran\n");
    return 99;
  }
  return failed > 0 ? 1 : 0;
}
