/* batch.c - placeholder, being written */
