#include "model/arch.h"
