// The data plane's view of the backend seam (kept so comm.cpp's include stays put; everything is in backend.h).
#pragma once

#include "backend.h"
