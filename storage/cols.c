/* cols.c - placeholder, being written */
