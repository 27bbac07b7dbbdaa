/* cudaemu stands in for this header (tests/cudaemu/cudaemu.h). */
#include "../cudaemu.h"
