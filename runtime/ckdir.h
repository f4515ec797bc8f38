/* ckdir.h — the layout of a --checkpoint directory, stated once for every
 * program that reads or writes one: libgslrt (checkpoint.c, ckpt_*.c,
 * main.c) and gslrun. Needs no MPI. */
#ifndef GSLRT_CKDIR_H
#define GSLRT_CKDIR_H

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define CKDIR_PATH 4096              /* room for a path */
#define CKDIR_NAME 256               /* room for a name in DIR, a tensor's name or file */
#define CKDIR_RUN 33                 /* room for a run identity: 32 hex digits and a NUL */
#define CKDIR_MAX_DIGITS 18          /* the longest step a name holds that is read back */
#define CKDIR_MAX_MANIFEST (64 << 20) /* longest manifest accepted */
#define CKDIR_MANIFEST "manifest.json" /* a checkpoint's manifest, in its directory */
#define CKDIR_LOCK ".lock"           /* the lock file in DIR */

/* What DIR/name is, never following a link (gslrt_ckdir_entry_kind). */
enum { CKDIR_NONE, CKDIR_LINK, CKDIR_FILE, CKDIR_BARE_DIR, CKDIR_COMPLETE };

/* The step of a checkpoint's name "step-DIGITS" (1 to CKDIR_MAX_DIGITS
 * digits), or -1 for any other name. */
int64_t gslrt_ckdir_step_of(const char *name);
/* Whether name is a temporary ("step-....tmp.*": being written, or an
 * existing checkpoint moved aside). */
int gslrt_ckdir_is_temp(const char *name);
/* The names of step's checkpoint into buf (cap bytes), as snprintf
 * returns: its own, "step-%08lld"; its temporary while rank 0 of process
 * pid writes it, "step-%08lld.tmp.PID"; and an existing one, final,
 * moved aside by process pid, "FINAL.tmp.old.PID". */
int gslrt_ckdir_step_name(char *buf, size_t cap, int64_t step);
int gslrt_ckdir_temp_name(char *buf, size_t cap, int64_t step, long pid);
int gslrt_ckdir_aside_name(char *buf, size_t cap, const char *final, long pid);
/* dir/name into buf (CKDIR_PATH bytes); whether it fit. */
int gslrt_ckdir_join(char *buf, const char *dir, const char *name);

/* What the entry DIR/name is (CKDIR_*), DIR open as dfd: CKDIR_COMPLETE
 * a directory holding a regular file manifest.json. */
int gslrt_ckdir_entry_kind(int dfd, const char *name);
/* A fresh listing of DIR (its own open file description, so that scans
 * do not share a position), or NULL with errno. */
DIR *gslrt_ckdir_list(int dfd);
/* The newest complete checkpoint in DIR (the highest step of a name
 * gslrt_ckdir_step_of reads, CKDIR_COMPLETE): its step, its name into
 * found (cap bytes); -1 if none, -2 with errno if DIR cannot be listed. */
int64_t gslrt_ckdir_newest(int dfd, char *found, size_t cap);

/* The text of the manifest open as fd, named path in messages
 * (malloc'd, NUL-terminated, its length in *len), read from its start;
 * NULL with the cause in err (errlen bytes). fd stays open. */
char *gslrt_ckdir_read_manifest_fd(int fd, const char *path, size_t *len, char *err, int errlen);
/* The text of DIR/name/manifest.json, not through a link; as above. */
char *gslrt_ckdir_read_manifest(int dfd, const char *name, size_t *len, char *err, int errlen);
/* The run identity in the manifest of DIR/name into run (CKDIR_RUN
 * bytes), and, if mtime is not NULL, the manifest's time of change: 0, or
 * -1 if it cannot be read or has none. */
int gslrt_ckdir_run_of(int dfd, const char *name, char *run, struct timespec *mtime);

/* DIR/.lock's text for the run of pid on host into buf (cap bytes), as
 * snprintf returns; and the pid and host (256 bytes) read back from it:
 * whether line names both. */
int gslrt_ckdir_lock_line(char *buf, size_t cap, long pid, const char *host);
int gslrt_ckdir_lock_holder(const char *line, long *pid, char *host);

#endif
