#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <numeric>
#include <queue>
#include <set>
#include <string>
#include <vector>
using namespace std;
vector<int> p;
int find(int x) { while (p[x] != x) { p[x] = p[p[x]]; x = p[x]; } return x; }
int main() {
    int n, m;
    cin >> n >> m;
    p.resize(n + 1);
    iota(p.begin(), p.end(), 0);
    int c = n;
    for (int i = 0; i < m; i++) { int a, b; cin >> a >> b; a = find(a); b = find(b); if (a != b) { p[a] = b; c--; } }
    cout << c << endl;
    return 0;
}
