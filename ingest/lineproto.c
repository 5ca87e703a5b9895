/* lineproto.c - placeholder, being written */
#include "ingest/lp.h"
