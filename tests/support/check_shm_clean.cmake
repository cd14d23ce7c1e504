# Fails if /dev/shm holds a fluxcpp segment.
file(GLOB left /dev/shm/*fluxcpp*)
if(left)
  message(FATAL_ERROR "fluxcpp segments left in /dev/shm: ${left}")
endif()
message(STATUS "/dev/shm holds no fluxcpp segment")
