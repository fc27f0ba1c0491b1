-- luacheck configuration: the Lua library, specs, examples and benchmarks.
std = "luajit"
max_line_length = 100
files["spec"] = { std = "+busted", max_line_length = 120 }
