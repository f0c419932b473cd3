#include "model/params.h"
