/* series.c - placeholder, being written */
