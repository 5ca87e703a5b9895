/* wal.c - placeholder, being written */
