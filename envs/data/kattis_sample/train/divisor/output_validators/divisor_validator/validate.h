// A small helper header for Kattis output validators (the protocol: argv input answer
// feedback_dir [flags]; the team's output on stdin; exit 42 accept, 43 reject).
#pragma once
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

namespace validate {
inline std::string feedback_dir;
inline std::ifstream judge_in, judge_ans;

inline void init(int argc, char** argv) {
    if (argc < 4) { std::cerr << "usage: validator input answer feedback_dir\n"; std::exit(1); }
    judge_in.open(argv[1]);
    judge_ans.open(argv[2]);
    feedback_dir = argv[3];
}

[[noreturn]] inline void verdict(bool accepted, const std::string& message) {
    std::ofstream(feedback_dir + "/judgemessage.txt") << message << "\n";
    std::cout << message << "\n";
    std::exit(accepted ? 42 : 43);
}
}  // namespace validate
