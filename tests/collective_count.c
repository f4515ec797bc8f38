/* tests/collective_count.c — a PMPI shim that counts a process's MPI
 * collectives, for tests/checkpoint_collectives.sh.
 *
 * Compiled by the test (mpicc -shared -fPIC) and preloaded into a compiled
 * program's ranks (LD_PRELOAD), it defines each collective of the MPI
 * interface, blocking and non-blocking, counts the call and passes it on
 * to its PMPI_ twin. MPI_Finalize writes one line on stderr,
 *   collective_count: rank R: N collectives, M MPI-IO collective calls
 * where M counts MPI_File_open, _set_view, _write_all, _read_all, _sync and
 * _close (each collective by definition). MPICH's own library calls the
 * PMPI_ names inside (ROMIO's agreements within MPI_File_open, say), so
 * what is counted is what libgslrt and the compiled program call. */
#include <mpi.h>
#include <stdio.h>

static long collectives; /* collective calls made */
static long file_calls;  /* MPI-IO collective calls made */

int MPI_Bcast(void *b, int n, MPI_Datatype t, int root, MPI_Comm c) {
  collectives++;
  return PMPI_Bcast(b, n, t, root, c);
}
int MPI_Ibcast(void *b, int n, MPI_Datatype t, int root, MPI_Comm c, MPI_Request *r) {
  collectives++;
  return PMPI_Ibcast(b, n, t, root, c, r);
}
int MPI_Allreduce(const void *s, void *d, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
  collectives++;
  return PMPI_Allreduce(s, d, n, t, op, c);
}
int MPI_Iallreduce(const void *s, void *d, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c, MPI_Request *r) {
  collectives++;
  return PMPI_Iallreduce(s, d, n, t, op, c, r);
}
int MPI_Reduce(const void *s, void *d, int n, MPI_Datatype t, MPI_Op op, int root, MPI_Comm c) {
  collectives++;
  return PMPI_Reduce(s, d, n, t, op, root, c);
}
int MPI_Ireduce(const void *s, void *d, int n, MPI_Datatype t, MPI_Op op, int root, MPI_Comm c, MPI_Request *r) {
  collectives++;
  return PMPI_Ireduce(s, d, n, t, op, root, c, r);
}
int MPI_Gather(const void *s, int sn, MPI_Datatype st, void *d, int dn, MPI_Datatype dt, int root, MPI_Comm c) {
  collectives++;
  return PMPI_Gather(s, sn, st, d, dn, dt, root, c);
}
int MPI_Igather(const void *s, int sn, MPI_Datatype st, void *d, int dn, MPI_Datatype dt, int root, MPI_Comm c,
                MPI_Request *r) {
  collectives++;
  return PMPI_Igather(s, sn, st, d, dn, dt, root, c, r);
}
int MPI_Gatherv(const void *s, int sn, MPI_Datatype st, void *d, const int dn[], const int dd[], MPI_Datatype dt,
                int root, MPI_Comm c) {
  collectives++;
  return PMPI_Gatherv(s, sn, st, d, dn, dd, dt, root, c);
}
int MPI_Igatherv(const void *s, int sn, MPI_Datatype st, void *d, const int dn[], const int dd[], MPI_Datatype dt,
                 int root, MPI_Comm c, MPI_Request *r) {
  collectives++;
  return PMPI_Igatherv(s, sn, st, d, dn, dd, dt, root, c, r);
}
int MPI_Allgather(const void *s, int sn, MPI_Datatype st, void *d, int dn, MPI_Datatype dt, MPI_Comm c) {
  collectives++;
  return PMPI_Allgather(s, sn, st, d, dn, dt, c);
}
int MPI_Iallgather(const void *s, int sn, MPI_Datatype st, void *d, int dn, MPI_Datatype dt, MPI_Comm c,
                   MPI_Request *r) {
  collectives++;
  return PMPI_Iallgather(s, sn, st, d, dn, dt, c, r);
}
int MPI_Allgatherv(const void *s, int sn, MPI_Datatype st, void *d, const int dn[], const int dd[], MPI_Datatype dt,
                   MPI_Comm c) {
  collectives++;
  return PMPI_Allgatherv(s, sn, st, d, dn, dd, dt, c);
}
int MPI_Iallgatherv(const void *s, int sn, MPI_Datatype st, void *d, const int dn[], const int dd[],
                    MPI_Datatype dt, MPI_Comm c, MPI_Request *r) {
  collectives++;
  return PMPI_Iallgatherv(s, sn, st, d, dn, dd, dt, c, r);
}
int MPI_Scatter(const void *s, int sn, MPI_Datatype st, void *d, int dn, MPI_Datatype dt, int root, MPI_Comm c) {
  collectives++;
  return PMPI_Scatter(s, sn, st, d, dn, dt, root, c);
}
int MPI_Iscatter(const void *s, int sn, MPI_Datatype st, void *d, int dn, MPI_Datatype dt, int root, MPI_Comm c,
                 MPI_Request *r) {
  collectives++;
  return PMPI_Iscatter(s, sn, st, d, dn, dt, root, c, r);
}
int MPI_Scatterv(const void *s, const int sn[], const int sd[], MPI_Datatype st, void *d, int dn, MPI_Datatype dt,
                 int root, MPI_Comm c) {
  collectives++;
  return PMPI_Scatterv(s, sn, sd, st, d, dn, dt, root, c);
}
int MPI_Alltoall(const void *s, int sn, MPI_Datatype st, void *d, int dn, MPI_Datatype dt, MPI_Comm c) {
  collectives++;
  return PMPI_Alltoall(s, sn, st, d, dn, dt, c);
}
int MPI_Ialltoall(const void *s, int sn, MPI_Datatype st, void *d, int dn, MPI_Datatype dt, MPI_Comm c,
                  MPI_Request *r) {
  collectives++;
  return PMPI_Ialltoall(s, sn, st, d, dn, dt, c, r);
}
int MPI_Alltoallv(const void *s, const int sn[], const int sd[], MPI_Datatype st, void *d, const int dn[],
                  const int dd[], MPI_Datatype dt, MPI_Comm c) {
  collectives++;
  return PMPI_Alltoallv(s, sn, sd, st, d, dn, dd, dt, c);
}
int MPI_Ialltoallv(const void *s, const int sn[], const int sd[], MPI_Datatype st, void *d, const int dn[],
                   const int dd[], MPI_Datatype dt, MPI_Comm c, MPI_Request *r) {
  collectives++;
  return PMPI_Ialltoallv(s, sn, sd, st, d, dn, dd, dt, c, r);
}
int MPI_Reduce_scatter_block(const void *s, void *d, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
  collectives++;
  return PMPI_Reduce_scatter_block(s, d, n, t, op, c);
}
int MPI_Ireduce_scatter_block(const void *s, void *d, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c,
                              MPI_Request *r) {
  collectives++;
  return PMPI_Ireduce_scatter_block(s, d, n, t, op, c, r);
}
int MPI_Reduce_scatter(const void *s, void *d, const int n[], MPI_Datatype t, MPI_Op op, MPI_Comm c) {
  collectives++;
  return PMPI_Reduce_scatter(s, d, n, t, op, c);
}
int MPI_Ireduce_scatter(const void *s, void *d, const int n[], MPI_Datatype t, MPI_Op op, MPI_Comm c,
                        MPI_Request *r) {
  collectives++;
  return PMPI_Ireduce_scatter(s, d, n, t, op, c, r);
}
int MPI_Barrier(MPI_Comm c) {
  collectives++;
  return PMPI_Barrier(c);
}
int MPI_Ibarrier(MPI_Comm c, MPI_Request *r) {
  collectives++;
  return PMPI_Ibarrier(c, r);
}
int MPI_Scan(const void *s, void *d, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
  collectives++;
  return PMPI_Scan(s, d, n, t, op, c);
}
int MPI_Exscan(const void *s, void *d, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
  collectives++;
  return PMPI_Exscan(s, d, n, t, op, c);
}

int MPI_File_open(MPI_Comm c, const char *name, int amode, MPI_Info info, MPI_File *fh) {
  file_calls++;
  return PMPI_File_open(c, name, amode, info, fh);
}
int MPI_File_set_view(MPI_File fh, MPI_Offset disp, MPI_Datatype et, MPI_Datatype ft, const char *rep,
                      MPI_Info info) {
  file_calls++;
  return PMPI_File_set_view(fh, disp, et, ft, rep, info);
}
int MPI_File_write_all(MPI_File fh, const void *b, int n, MPI_Datatype t, MPI_Status *st) {
  file_calls++;
  return PMPI_File_write_all(fh, b, n, t, st);
}
int MPI_File_read_all(MPI_File fh, void *b, int n, MPI_Datatype t, MPI_Status *st) {
  file_calls++;
  return PMPI_File_read_all(fh, b, n, t, st);
}
int MPI_File_sync(MPI_File fh) {
  file_calls++;
  return PMPI_File_sync(fh);
}
int MPI_File_close(MPI_File *fh) {
  file_calls++;
  return PMPI_File_close(fh);
}

int MPI_Finalize(void) {
  int rank = -1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  fprintf(stderr, "collective_count: rank %d: %ld collectives, %ld MPI-IO collective calls\n", rank, collectives,
          file_calls);
  fflush(stderr);
  return PMPI_Finalize();
}
