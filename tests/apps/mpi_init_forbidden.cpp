// Preloaded (LD_PRELOAD) into a program to show that it never starts MPI: MPI_Init and
// MPI_Init_thread print one line and end the process with exit code 99.
// tests/apps/check_without_mpi.sh runs every program's --check with it.
#include <cstdio>
#include <cstdlib>

extern "C" int MPI_Init(int*, char***) {
  std::fputs("mpi_init_forbidden: MPI_Init called\n", stderr);
  std::_Exit(99);
}

extern "C" int MPI_Init_thread(int*, char***, int, int*) {
  std::fputs("mpi_init_forbidden: MPI_Init_thread called\n", stderr);
  std::_Exit(99);
}
