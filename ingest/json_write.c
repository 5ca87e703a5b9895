/* json_write.c - placeholder, being written */
