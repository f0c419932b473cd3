#include "model/memory.h"
