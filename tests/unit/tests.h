/* tests.h — the CUnit suites, one test_<module>.c each; main.c registers
 * every suite and exits with the number of failures. */
#ifndef GSL_TESTS_H
#define GSL_TESTS_H

#include <CUnit/CUnit.h>

void add_lexer_tests(void);   /* test_lexer.c */
void add_parser_tests(void);  /* test_parser.c */
void add_sema_tests(void);    /* test_sema.c */
void add_inline_tests(void);  /* test_inline.c */
void add_ir_tests(void);      /* test_ir.c */
void add_sharding_tests(void); /* test_sharding.c */
void add_rule_tests(void);    /* test_rule.c */
void add_codegen_tests(void); /* test_codegen.c */
void add_plan_tests(void);    /* test_plan.c */
void add_runtime_tests(void); /* test_runtime.c */
void add_bf16_tests(void);    /* test_bf16.c */

/* Adds a suite and its tests, dying on a registry error. */
CU_pSuite tests_suite(const char *name);
void tests_add(CU_pSuite s, const char *name, CU_TestFunc fn);
/* The first line of each diagnostic in diags (no source lines or carets),
 * malloc'ed. */
char *tests_first_lines(const char *diags);
/* name in a scratch directory made on first use and removed, with what is
 * in it, at exit (the last four paths returned stay valid) */
const char *tests_tmp_path(const char *name);

#endif
