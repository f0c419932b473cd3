#pragma once
#include "model/units.h"
