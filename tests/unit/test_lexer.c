/* test_lexer.c — the lexer (grammar/lexer.re): token kinds, values and
 * positions, which newlines reach the parser, literals, comments, and the
 * text and place of lexical errors.
 *
 * Most tests lex a text into one string, a token per line in the form
 * `line:col kind[ value]`, and compare it whole with the expected string;
 * errors are captured by a Diag over a memory stream. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "gslc.h"
#include "lexer.h"
#include "parser.h"
#include "tests.h"

/* Everything the lexer reports for text: the tokens and the diagnostics. */
typedef struct Lexed {
  char *tokens; /* one `line:col kind[ value]` line per token, END excluded */
  char *diags;  /* diagnostics as printed */
  int nerrors;  /* lx.nerrors at the end */
} Lexed;

static Lexed lex_text_len(const char *text, size_t len) {
  Lexed r;
  size_t tlen, dlen;
  FILE *tf = open_memstream(&r.tokens, &tlen);
  FILE *df = open_memstream(&r.diags, &dlen);
  char *buf = malloc(len + 1);
  memcpy(buf, text, len);
  buf[len] = '\0';
  Source src = {"t.gsl", buf, len};
  Arena *a = arena_new();
  Lexer lx;
  Token t;
  Diag d = {df, 0, false};
  lex_init(&lx, &src, a, &d);
  for (int guard = 0; lex_next(&lx, &t) != TOK_END && guard < 10000; guard++) {
    fprintf(tf, "%u:%u %s", t.span.line, t.span.col, lex_token_name(t.kind));
    if (t.kind == TOK_NAME)
      fprintf(tf, " %s", t.text);
    else if (t.kind == TOK_STRING)
      fprintf(tf, " [%s]", t.text);
    else if (t.kind == TOK_INT)
      fprintf(tf, " %lld", (long long)t.ival);
    else if (t.kind == TOK_FLOAT)
      fprintf(tf, " %g", t.fval);
    else if (t.kind == TOK_UNCLOSED)
      fprintf(tf, " %u:%u%s", t.open.line, t.open.col, t.at_eof ? " eof" : "");
    fputc('\n', tf);
  }
  r.nerrors = lx.nerrors;
  fclose(tf);
  fclose(df);
  arena_free(a);
  free(buf);
  return r;
}

static Lexed lex_text(const char *text) { return lex_text_len(text, strlen(text)); }

static void lexed_free(Lexed *r) {
  free(r->tokens);
  free(r->diags);
}

/* Asserts the tokens of text and that it lexes without errors. */
static void check_tokens(const char *text, const char *want) {
  Lexed r = lex_text(text);
  CU_ASSERT_STRING_EQUAL(r.tokens, want);
  CU_ASSERT_STRING_EQUAL(r.diags, "");
  CU_ASSERT_EQUAL(r.nerrors, 0);
  lexed_free(&r);
}

static void test_lex_sample(void) {
  check_tokens("param wg: f32[M, E] replicate() = normal(0.02)\n"
               "  let y, aux = x @ w # comment\n",
               "1:1 'param'\n1:7 name wg\n1:9 ':'\n1:11 name f32\n1:14 '['\n1:15 name M\n"
               "1:16 ','\n1:18 name E\n1:19 ']'\n1:21 name replicate\n1:30 '('\n1:31 ')'\n"
               "1:33 '='\n1:35 name normal\n1:41 '('\n1:42 float 0.02\n1:46 ')'\n1:47 newline\n"
               "2:3 'let'\n2:7 name y\n2:8 ','\n2:10 name aux\n2:14 '='\n2:16 name x\n2:18 '@'\n"
               "2:20 name w\n");
}

static void test_lex_keywords(void) {
  check_tokens("mesh const param input output fn let return import train with frozen moe true false "
               "meshy _ _x1 Let",
               "1:1 'mesh'\n1:6 'const'\n1:12 'param'\n1:18 'input'\n1:24 'output'\n1:31 'fn'\n"
               "1:34 'let'\n1:38 'return'\n1:45 'import'\n1:52 'train'\n1:58 'with'\n1:63 'frozen'\n"
               "1:70 'moe'\n1:74 'true'\n1:79 'false'\n1:85 name meshy\n1:91 name _\n1:93 name _x1\n"
               "1:97 name Let\n");
  check_tokens("for in fork inn", "1:1 'for'\n1:5 'in'\n1:8 name fork\n1:13 name inn\n");
}

static void test_lex_punctuation(void) {
  check_tokens("( ) [ ] { } , : ; = + - * / @ < > <= >= == != <==",
               "1:1 '('\n1:3 ')'\n1:5 '['\n1:7 ']'\n1:9 '{'\n1:11 '}'\n1:13 ','\n1:15 ':'\n"
               "1:17 ';'\n1:19 '='\n1:21 '+'\n1:23 '-'\n1:25 '*'\n1:27 '/'\n1:29 '@'\n1:31 '<'\n"
               "1:33 '>'\n1:35 '<='\n1:38 '>='\n1:41 '=='\n1:44 '!='\n1:47 '<='\n1:49 '='\n");
}

static void test_lex_numbers(void) {
  check_tokens("0 42 9223372036854775807 1.0 2e-3 .5 1. 1.5E+2 3e4 7x",
               "1:1 integer 0\n1:3 integer 42\n1:6 integer 9223372036854775807\n1:26 float 1\n"
               "1:30 float 0.002\n1:35 float 0.5\n1:38 float 1\n1:41 float 150\n1:48 float 30000\n"
               "1:52 integer 7\n1:53 name x\n");
  /* an integer before '..' is not a float: 0..4 is a range */
  check_tokens("0..4 L..2*L 1...5 1.5..2", "1:1 integer 0\n1:2 '..'\n1:4 integer 4\n1:6 name L\n1:7 '..'\n"
               "1:9 integer 2\n1:10 '*'\n1:11 name L\n1:13 integer 1\n1:14 '..'\n1:16 float 0.5\n"
               "1:19 float 1.5\n1:22 '..'\n1:24 integer 2\n");
  Lexed r = lex_text("1.e");
  CU_ASSERT_STRING_EQUAL(r.tokens, "1:1 float 1\n1:3 name e\n");
  lexed_free(&r);
}

static void test_lex_strings(void) {
  check_tokens("import \"nn\" \"a\\\"b\\\\c\\nd\" \"\" \"#x\"",
               "1:1 'import'\n1:8 string [nn]\n1:13 string [a\"b\\c\nd]\n1:26 string []\n"
               "1:29 string [#x]\n");
}

static void test_lex_comments(void) {
  check_tokens("# leading comment\n\n  # another\nlet a = 1 # trailing\n# between\n\nlet b = 2\n# last",
               "4:1 'let'\n4:5 name a\n4:7 '='\n4:9 integer 1\n4:21 newline\n"
               "7:1 'let'\n7:5 name b\n7:7 '='\n7:9 integer 2\n");
}

static void test_lex_newlines(void) {
  /* none at the start, one per run, none before the end */
  check_tokens("\n\na\n\n\nb;\n c\n\n", "3:1 name a\n3:2 newline\n6:1 name b\n6:2 ';'\n6:3 newline\n7:2 name c\n");
  /* none inside ( and [, but inside { even when that is inside ( */
  check_tokens("f(a,\n b)[\n1\n]\nfn g() {\n let x = h(moe(t) (u) {\n return u\n })\n}",
               "1:1 name f\n1:2 '('\n1:3 name a\n1:4 ','\n2:2 name b\n2:3 ')'\n2:4 '['\n3:1 integer 1\n"
               "4:1 ']'\n4:2 newline\n5:1 'fn'\n5:4 name g\n5:5 '('\n5:6 ')'\n5:8 '{'\n5:9 newline\n"
               "6:2 'let'\n6:6 name x\n6:8 '='\n6:10 name h\n6:11 '('\n6:12 'moe'\n6:15 '('\n6:16 name t\n"
               "6:17 ')'\n6:19 '('\n6:20 name u\n6:21 ')'\n6:23 '{'\n6:24 newline\n7:2 'return'\n"
               "7:9 name u\n7:10 newline\n8:2 '}'\n8:3 ')'\n8:4 newline\n9:1 '}'\n");
  /* CRLF line ends */
  check_tokens("a\r\nb\r\n", "1:1 name a\n1:3 newline\n2:1 name b\n");
}

static void test_lex_unclosed(void) {
  /* a statement keyword at the start of a line closes ( and [ */
  check_tokens("let a = f([1,\n  2\nlet b = 3",
               "1:1 'let'\n1:5 name a\n1:7 '='\n1:9 name f\n1:10 '('\n1:11 '['\n1:12 integer 1\n"
               "1:13 ','\n2:3 integer 2\n2:4 unclosed bracket 1:11\n2:4 unclosed bracket 1:10\n"
               "2:4 newline\n3:1 'let'\n3:5 name b\n3:7 '='\n3:9 integer 3\n");
  /* only a top-level keyword closes {; the end of the input closes all */
  check_tokens("fn f(x) {\n let y = x\nparam w: f32\nfn g(\n",
               "1:1 'fn'\n1:4 name f\n1:5 '('\n1:6 name x\n1:7 ')'\n1:9 '{'\n1:10 newline\n2:2 'let'\n"
               "2:6 name y\n2:8 '='\n2:10 name x\n2:11 unclosed bracket 1:9\n2:11 newline\n"
               "3:1 'param'\n3:7 name w\n3:8 ':'\n3:10 name f32\n3:13 newline\n"
               "4:1 'fn'\n4:4 name g\n4:5 '('\n4:6 unclosed bracket 4:5 eof\n");
  /* a loop's body may hold any statement: only the end of the input closes
   * it; 'for' closes ( and [ */
  check_tokens("for i in 0..1 {\nparam w: f32\nlet a = f(\nfor",
               "1:1 'for'\n1:5 name i\n1:7 'in'\n1:10 integer 0\n1:11 '..'\n1:13 integer 1\n1:15 '{'\n"
               "1:16 newline\n2:1 'param'\n2:7 name w\n2:8 ':'\n2:10 name f32\n2:13 newline\n3:1 'let'\n"
               "3:5 name a\n3:7 '='\n3:9 name f\n3:10 '('\n3:11 unclosed bracket 3:10\n3:11 newline\n"
               "4:1 'for'\n4:4 unclosed bracket 1:15 eof\n");
  /* a stray closer changes nothing; a closer pops what it encloses */
  check_tokens("a)\n[(b]\nc", "1:1 name a\n1:2 ')'\n1:3 newline\n2:1 '['\n2:2 '('\n2:3 name b\n"
                              "2:4 ']'\n2:5 newline\n3:1 name c\n");
}

static void test_lex_bad_char(void) {
  Lexed r = lex_text("let a = 1\nlet $b = 2 ` \xc3\xa9\n");
  CU_ASSERT_STRING_EQUAL(r.tokens, "1:1 'let'\n1:5 name a\n1:7 '='\n1:9 integer 1\n1:10 newline\n"
                                   "2:1 'let'\n2:6 name b\n2:8 '='\n2:10 integer 2\n");
  CU_ASSERT_STRING_EQUAL(r.diags,
                         "t.gsl:2:5: error: unexpected character '$'\n"
                         "    2 | let $b = 2 ` \xc3\xa9\n"
                         "      |     ^\n"
                         "t.gsl:2:12: error: unexpected character '`'\n"
                         "    2 | let $b = 2 ` \xc3\xa9\n"
                         "      |            ^\n"
                         "t.gsl:2:14: error: unexpected character '\xc3\xa9'\n"
                         "    2 | let $b = 2 ` \xc3\xa9\n"
                         "      |              ^~\n");
  CU_ASSERT_EQUAL(r.nerrors, 3);
  lexed_free(&r);
}

static void test_lex_nul_and_binary(void) {
  /* an embedded NUL is an invalid character; the input ends at len */
  Lexed r = lex_text_len("a\0b\xff", 4);
  CU_ASSERT_STRING_EQUAL(r.tokens, "1:1 name a\n1:3 name b\n");
  CU_ASSERT_STRING_EQUAL(r.diags,
                         "t.gsl:1:2: error: unexpected character '\\x00'\n"
                         "    1 | a b\xff\n" /* the NUL is shown as a space */
                         "      |  ^\n"
                         "t.gsl:1:4: error: unexpected character '\\xff'\n"
                         "    1 | a b\xff\n"
                         "      |    ^\n");
  CU_ASSERT_EQUAL(r.nerrors, 2);
  lexed_free(&r);
}


static void test_lex_string_errors(void) {
  Lexed r = lex_text("s = \"ab\\q\" \"open\nt = \"x\\");
  CU_ASSERT_STRING_EQUAL(r.tokens, "1:1 name s\n1:3 '='\n1:5 string [abq]\n1:12 string [open]\n"
                                   "1:17 newline\n2:1 name t\n2:3 '='\n2:5 string [x]\n");
  char *d = tests_first_lines(r.diags);
  CU_ASSERT_STRING_EQUAL(d, "t.gsl:1:8: error: unknown escape sequence '\\q' in string\n"
                            "t.gsl:1:12: error: unterminated string\n"
                            "t.gsl:2:5: error: unterminated string\n");
  CU_ASSERT_EQUAL(r.nerrors, 3);
  free(d);
  lexed_free(&r);
}

static void test_lex_number_errors(void) {
  Lexed r = lex_text("9223372036854775808 1e999 1e-999");
  CU_ASSERT_STRING_EQUAL(r.tokens, "1:1 integer 0\n1:21 float 0\n1:27 float 0\n");
  char *d = tests_first_lines(r.diags);
  CU_ASSERT_STRING_EQUAL(d, "t.gsl:1:1: error: integer literal 9223372036854775808 is too large\n"
                            "t.gsl:1:21: error: float literal 1e999 is out of range\n");
  CU_ASSERT_EQUAL(r.nerrors, 2);
  free(d);
  lexed_free(&r);
}

void add_lexer_tests(void) {
  CU_pSuite s = tests_suite("lexer");
  tests_add(s, "sample tokens and positions", test_lex_sample);
  tests_add(s, "keywords and names", test_lex_keywords);
  tests_add(s, "punctuation", test_lex_punctuation);
  tests_add(s, "integers and floats", test_lex_numbers);
  tests_add(s, "strings and escapes", test_lex_strings);
  tests_add(s, "comments", test_lex_comments);
  tests_add(s, "significant newlines", test_lex_newlines);
  tests_add(s, "brackets closed by the lexer", test_lex_unclosed);
  tests_add(s, "invalid characters", test_lex_bad_char);
  tests_add(s, "NUL bytes and binary", test_lex_nul_and_binary);
  tests_add(s, "string errors", test_lex_string_errors);
  tests_add(s, "number errors", test_lex_number_errors);
}
