#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "core/error.h"

namespace di {

void init_logging(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("deltainfer");
  logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") fail("unknown log level '{}'", level);
  logger->set_level(lvl);
  spdlog::set_default_logger(logger);
}

}  // namespace di
