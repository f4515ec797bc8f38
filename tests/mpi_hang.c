/* tests/mpi_hang.c — an LD_PRELOAD library for tests/run_end.sh: MPI calls
 * that never return, as MPI_Finalize was seen not to under UCX's TCP
 * transport and MPI_Abort may not when the process manager is out of
 * reach. Through the PMPI profiling interface: MPI_Finalize on the ranks
 * listed in HANG_FINALIZE (",0,1," style, or "0,1"), MPI_Abort on those
 * in HANG_ABORT, wait for ever (pause), as if the call never returned;
 * MPI_Finalize on those in EXIT_FINALIZE calls exit(1) (as MPICH's error
 * handler does when the call fails), on those in HUP_FINALIZE raises
 * SIGHUP (a process manager's clean-up, or its connection gone) and on
 * those in KILL_FINALIZE raises SIGKILL; every other rank calls the real
 * one. For tests/gslrun.sh, MPI_File_open on the ranks in ABORT_OPEN
 * calls MPI_Abort with the code ABORT_CODE, once: only while the file
 * ABORT_ONCE can still be made (as MPICH's ROMIO was seen to abort a rank
 * whose peer died inside a checkpoint, with an error code whose low byte,
 * the rank's exit status, is 5). */
#include <fcntl.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Whether this rank (PMI_RANK) is in the list the variable var names. */
static int listed(const char *var) {
  const char *rank = getenv("PMI_RANK"), *list = getenv(var);
  char key[32], all[512];
  if (!rank || !list)
    return 0;
  snprintf(key, sizeof key, ",%s,", rank);
  snprintf(all, sizeof all, ",%s,", list);
  return strstr(all, key) != NULL;
}

int MPI_Finalize(void) {
  if (listed("HANG_FINALIZE"))
    for (;;)
      pause();
  if (listed("EXIT_FINALIZE"))
    exit(1);
  if (listed("HUP_FINALIZE"))
    raise(SIGHUP);
  if (listed("KILL_FINALIZE"))
    raise(SIGKILL);
  return PMPI_Finalize();
}

int MPI_Abort(MPI_Comm comm, int code) {
  if (listed("HANG_ABORT"))
    for (;;)
      pause();
  return PMPI_Abort(comm, code);
}

int MPI_File_open(MPI_Comm comm, const char *name, int amode, MPI_Info info, MPI_File *fh) {
  const char *once = getenv("ABORT_ONCE"), *code = getenv("ABORT_CODE");
  int fd;
  if (listed("ABORT_OPEN") && once && code && (fd = open(once, O_CREAT | O_EXCL | O_WRONLY, 0666)) >= 0) {
    close(fd);
    PMPI_Abort(MPI_COMM_WORLD, atoi(code));
  }
  return PMPI_File_open(comm, name, amode, info, fh);
}
