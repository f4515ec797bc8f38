# tests/local.mk — the test lists, included by Makefile.am.
