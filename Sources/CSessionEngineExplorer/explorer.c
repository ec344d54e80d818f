#include "CSessionEngineExplorer.h"
int se_explorer_placeholder(void) { return 0; }
