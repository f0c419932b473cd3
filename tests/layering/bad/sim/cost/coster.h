#pragma once
#include "model/units.h"
#include "sim/cost/cost.h"
#include "sim/engine/engine.h"
