/* uring.c - placeholder, being written */
