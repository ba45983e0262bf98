#include "validate.h"

#include <algorithm>
#include <cctype>
#include <string>

static std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
}

int main(int argc, char** argv) {
    validate::init(argc, argv);
    bool relaxed_none = false;
    for (int i = 4; i < argc; ++i) relaxed_none |= std::string(argv[i]) == "case_insensitive_none";
    long long n;
    std::string judge, team, extra;
    validate::judge_in >> n;
    validate::judge_ans >> judge;
    if (!(std::cin >> team)) validate::verdict(false, "no output");
    if (std::cin >> extra) validate::verdict(false, "trailing output");
    std::string seen = relaxed_none ? lower(team) : team;
    if (judge == "none") validate::verdict(seen == "none", "expected none");
    if (seen == "none") validate::verdict(false, "there is a divisor");
    if (team.empty() || team.size() > 18 || !std::all_of(team.begin(), team.end(), ::isdigit))
        validate::verdict(false, "not a number");
    long long d = std::stoll(team);
    validate::verdict(d > 1 && d < n && n % d == 0, "checked " + team);
}
