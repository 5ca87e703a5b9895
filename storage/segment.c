/* segment.c - placeholder, being written */
