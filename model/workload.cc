#include "model/workload.h"
