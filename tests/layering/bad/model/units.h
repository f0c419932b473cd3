#pragma once
#include "sim/program/program.h"
