// The HTTP server's socket, below the protocol (tests/server/test_server.py drives the protocol).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <vector>

#include "server/http_server.h"

namespace di::server {
namespace {

// A burst of clients connecting at once must all be taken into the listen queue before the accept
// loop gets to them. cpp-httplib's own backlog is 5: past it Linux drops the SYN, so the seventh
// client waits a second for a retransmission (or, in a soak of 200 streams, was reset). Here nothing
// accepts (serve() never runs), so each connection must complete from the queue alone, at once.
TEST(HttpServer, ABurstOfConnectionsQueuesBeforeAccept) {
  ServerOptions options;
  options.port = 0;
  options.model_name = "m";
  HttpServer server(options);
  const int port = server.bind();
  constexpr int kClients = 64;
  std::vector<int> sockets;
  int connected = 0;
  for (int i = 0; i < kClients; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ASSERT_GE(fd, 0) << "socket: errno " << errno;
    sockets.push_back(fd);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(uint16_t(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
      ASSERT_EQ(errno, EINPROGRESS) << "connect: errno " << errno;
      pollfd writable{fd, POLLOUT, 0};
      if (::poll(&writable, 1, 500) != 1) continue;  // still waiting for the server's SYN-ACK
    }
    int error = 0;
    socklen_t length = sizeof error;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0) ++connected;
  }
  for (int fd : sockets) ::close(fd);
  EXPECT_EQ(connected, kClients) << "connections completed with nothing accepting them";
}

}  // namespace
}  // namespace di::server
