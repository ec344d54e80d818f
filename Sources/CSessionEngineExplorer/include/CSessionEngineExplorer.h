// The explorer's hooks into the Swift concurrency runtime.

#ifndef CSESSIONENGINE_EXPLORER_H
#define CSESSIONENGINE_EXPLORER_H

int se_explorer_placeholder(void);

#endif
