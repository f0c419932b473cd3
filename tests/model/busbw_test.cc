// The bus-bandwidth factor (model/busbw.h) against nccl-tests' doc/PERFORMANCE.md.
#include "model/busbw.h"

#include <gtest/gtest.h>

namespace stepcast {
namespace {

TEST(Busbw, FactorsAreNcclTestsConvention) {
  // 8 ranks: all-reduce moves 2(n-1)/n = 14/8 = 1.75 of S per link; reduce-scatter,
  // all-gather and all-to-all (n-1)/n = 7/8 = 0.875; broadcast and send/recv 1.
  EXPECT_DOUBLE_EQ(busbw_factor(BusOp::kAllReduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(busbw_factor(BusOp::kReduceScatter, 8), 0.875);
  EXPECT_DOUBLE_EQ(busbw_factor(BusOp::kAllGather, 8), 0.875);
  EXPECT_DOUBLE_EQ(busbw_factor(BusOp::kAllToAll, 8), 0.875);
  EXPECT_DOUBLE_EQ(busbw_factor(BusOp::kBroadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(BusOp::kSendRecv, 2), 1.0);
  // One rank moves nothing over a link: 2(1-1)/1 = 0.
  EXPECT_DOUBLE_EQ(busbw_factor(BusOp::kAllReduce, 1), 0.0);
  // Two ranks: all-reduce 2(2-1)/2 = 1.
  EXPECT_DOUBLE_EQ(busbw_factor(BusOp::kAllReduce, 2), 1.0);
}

TEST(Busbw, NamesAreTheMeasurementFilesOps) {
  EXPECT_EQ(bus_op_named("allreduce"), BusOp::kAllReduce);
  EXPECT_EQ(bus_op_named("reduce_scatter"), BusOp::kReduceScatter);
  EXPECT_EQ(bus_op_named("allgather"), BusOp::kAllGather);
  EXPECT_EQ(bus_op_named("all_to_all"), BusOp::kAllToAll);
  EXPECT_EQ(bus_op_named("broadcast"), BusOp::kBroadcast);
  EXPECT_EQ(bus_op_named("send_recv"), BusOp::kSendRecv);
  EXPECT_FALSE(bus_op_named("all_reduce").has_value());
  EXPECT_FALSE(bus_op_named("").has_value());
}

}  // namespace
}  // namespace stepcast
